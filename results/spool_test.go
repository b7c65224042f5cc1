package results

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDiskSpoolSurvivesRestart spools to disk, "restarts" with a new Store
// on the same directory, and replays what the first left.
func TestDiskSpoolSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	fb := newFakeBroker()
	fb.down = true
	cfg := testConfig(fb)
	cfg.DataDir, cfg.MemoryOnly = dir, false
	s1 := newStore(t, cfg)
	ctx := context.Background()
	var want []string
	for i := range 4 {
		id := fmt.Sprintf("t%d", i)
		body := rec(id, "SUCCESS")
		want = append(want, string(body))
		if err := s1.Put(ctx, Entry{TaskID: id, Status: "SUCCESS", Terminal: true, Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*.rec")); len(files) != 4 {
		t.Fatalf("%d spool files, want 4", len(files))
	}

	fb2 := newFakeBroker()
	fb2.set(func(f *fakeBroker) { f.down = true })
	cfg2 := testConfig(fb2)
	cfg2.DataDir, cfg2.MemoryOnly = dir, false
	s2 := newStore(t, cfg2)
	if st := s2.Stats(); st.Pending != 4 {
		t.Fatalf("restarted store has %d pending, want 4", st.Pending)
	}
	if got, ok := s2.Get("t2"); !ok || string(got) != want[2] {
		t.Errorf("Get before replay = %q %v", got, ok)
	}
	runStore(t, s2)
	fb2.set(func(f *fakeBroker) { f.down = false })
	waitFor(t, "replay", func() bool { return s2.Stats().Pending == 0 })
	for i := range 4 {
		ch := fmt.Sprintf("rayserve-result-t%d", i)
		if got := fb2.queue(ch); !slices.Equal(got, want[i:i+1]) {
			t.Errorf("%s = %q, want %q", ch, got, want[i])
		}
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*")); len(files) != 0 {
		t.Errorf("spool dir holds %v after replay, want nothing", files)
	}
}

func TestCorruptSpoolFileIsSetAside(t *testing.T) {
	dir := t.TempDir()
	fb := newFakeBroker()
	fb.down = true
	cfg := testConfig(fb)
	cfg.DataDir, cfg.MemoryOnly = dir, false
	s1 := newStore(t, cfg)
	_ = s1.Put(context.Background(), Entry{TaskID: "t1", Terminal: true, Body: rec("t1", "SUCCESS")})
	_ = s1.Put(context.Background(), Entry{TaskID: "t2", Terminal: true, Body: rec("t2", "SUCCESS")})
	files, _ := filepath.Glob(filepath.Join(dir, "*.rec"))
	if len(files) != 2 {
		t.Fatalf("files %v", files)
	}
	if err := os.WriteFile(files[0], []byte("{garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &logBuf{}
	cfg.Logger = slogTo(logs)
	s2 := newStore(t, cfg)
	if st := s2.Stats(); st.Pending != 1 {
		t.Errorf("pending %d, want 1", st.Pending)
	}
	if bad, _ := filepath.Glob(filepath.Join(dir, "*.bad")); len(bad) != 1 {
		t.Errorf("bad files %v, want 1", bad)
	}
	if !strings.Contains(logs.String(), "unreadable") {
		t.Errorf("no log of the bad file: %s", logs)
	}
}

func TestOversize(t *testing.T) {
	for _, tt := range []struct {
		name    string
		down    bool // the first write fails: the record goes through the replay
		dataDir bool
	}{
		{name: "direct"},
		{name: "direct, data dir", dataDir: true},
		{name: "replayed", down: true},
		{name: "replayed, data dir", down: true, dataDir: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fb := newFakeBroker()
			fb.down = tt.down
			cfg := testConfig(fb)
			cfg.MaxResultBytes = 128
			if tt.dataDir {
				cfg.DataDir, cfg.MemoryOnly = t.TempDir(), false
			}
			s := newStore(t, cfg)
			big := []byte(`{"task_id":"t1","status":"SUCCESS","result":"` + strings.Repeat("x", 200) + `"}`)
			sub := []byte(`{"task_id":"t1","status":"SUCCESS","result":null,"result_ref":"/v1/tasks/t1"}`)
			e := Entry{TaskID: "t1", Status: "SUCCESS", Terminal: true, Body: big, Substitute: sub}
			if err := s.Put(context.Background(), e); err != nil {
				t.Fatal(err)
			}
			if tt.down {
				runStore(t, s)
				fb.set(func(f *fakeBroker) { f.down = false })
				waitFor(t, "replay", func() bool { return s.Stats().Pending == 0 })
			}
			if got := fb.queue("rayserve-result-t1"); !slices.Equal(got, []string{string(sub)}) {
				t.Errorf("broker got %q, want the substitute", got)
			}
			if got, ok := s.Get("t1"); !ok || string(got) != string(big) {
				t.Errorf("Get = %q %v, want the whole record", got, ok)
			}
			if st := s.Stats(); st.Held != 1 {
				t.Errorf("held %d, want 1", st.Held)
			}
			if !tt.dataDir {
				return
			}
			if err := s.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			s2 := newStore(t, cfg)
			if got, ok := s2.Get("t1"); !ok || string(got) != string(big) {
				t.Errorf("after restart Get = %q %v, want the whole record", got, ok)
			}
			if st := s2.Stats(); st.Held != 1 || st.Pending != 0 {
				t.Errorf("after restart %+v, want one held, none pending", st)
			}
		})
	}
}

// putN stores n terminal records t<prefix>0.. to replyTo, with bodies of
// size bytes (a small JSON record when 0).
func putN(t *testing.T, s *Store, prefix string, n, size int, replyTo string) {
	t.Helper()
	for i := range n {
		id := fmt.Sprintf("%s%d", prefix, i)
		body := rec(id, "SUCCESS")
		if size > 0 {
			body = make([]byte, size)
		}
		if err := s.Put(context.Background(), Entry{TaskID: id, Status: "SUCCESS", Terminal: true, Body: body, ReplyTo: replyTo}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSpoolFullKeepsEveryRecord: when the spool reaches a bound (entries or
// bytes in memory, or the disk) it reports full instead of dropping the
// records the broker does not have; the records still in flight are taken
// beyond the bound; once the broker takes them all, it has room again.
func TestSpoolFullKeepsEveryRecord(t *testing.T) {
	for _, tt := range []struct {
		name     string
		disk     bool
		entries  int
		memBytes int64
		diskMax  int64
		size     int
		fullAt   int // the Put after which the spool is full
		wantMem  int // records in memory only at the end
		wantDisk int // record files at the end
	}{
		{name: "memory, entries", entries: 3, fullAt: 3, wantMem: 5},
		{name: "memory, bytes", memBytes: 2500, size: 1000, fullAt: 3, wantMem: 5},
		// Two entries in memory: the copies of records on disk leave
		// memory. The disk holds two records of ~1150 bytes; the third
		// finds no room and makes the spool full.
		{name: "disk", disk: true, entries: 2, diskMax: 2800, size: 1000, fullAt: 3, wantMem: 3, wantDisk: 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fb := newFakeBroker()
			fb.down = true
			logs := &logBuf{}
			cfg := testConfig(fb)
			cfg.Logger = slogTo(logs)
			cfg.SpoolEntries, cfg.SpoolMemoryBytes, cfg.SpoolDiskBytes = tt.entries, tt.memBytes, tt.diskMax
			if tt.disk {
				cfg.DataDir, cfg.MemoryOnly = t.TempDir(), false
			}
			s := newStore(t, cfg)
			for i := range 5 {
				putN(t, s, fmt.Sprintf("t%d-", i), 1, tt.size, "r")
				if full := s.Full(); full != (i+1 >= tt.fullAt) {
					t.Fatalf("after %d records Full() = %v, want full from %d", i+1, full, tt.fullAt)
				}
			}
			st := s.Stats()
			if st.Pending != 5 || st.Dropped != 0 || st.MemoryOnly != tt.wantMem || !st.Full {
				t.Fatalf("stats %+v, want 5 pending, none dropped, %d in memory only, full", st, tt.wantMem)
			}
			if tt.disk {
				if files, _ := filepath.Glob(filepath.Join(cfg.DataDir, "*.rec")); len(files) != tt.wantDisk {
					t.Errorf("%d files, want %d", len(files), tt.wantDisk)
				}
			}
			for i := range 5 {
				if _, ok := s.Get(fmt.Sprintf("t%d-0", i)); !ok {
					t.Errorf("Get(t%d-0) found nothing", i)
				}
			}
			if !strings.Contains(logs.String(), "result spool full") {
				t.Errorf("no warning of the full spool:\n%s", logs)
			}
			runStore(t, s)
			fb.set(func(f *fakeBroker) { f.down = false })
			waitFor(t, "replay", func() bool { return s.Stats().Pending == 0 })
			if n := len(fb.eventBodies("r")); n != 5 {
				t.Errorf("replayed %d, want 5", n)
			}
			if st := s.Stats(); st.Full || st.MemoryOnly != 0 || st.DiskBytes != 0 {
				t.Errorf("after the replay %+v, want room again", st)
			}
			if !strings.Contains(logs.String(), "room again") {
				t.Errorf("no log of the spool having room again:\n%s", logs)
			}
		})
	}
}

// TestDiskFullMakesRoomFromHeldRecords: held oversize records (the broker
// has their substitute) leave the disk to make room for a record the
// broker does not have, before the spool counts as full.
func TestDiskFullMakesRoomFromHeldRecords(t *testing.T) {
	fb := newFakeBroker()
	cfg := testConfig(fb)
	cfg.DataDir, cfg.MemoryOnly = t.TempDir(), false
	cfg.MaxResultBytes, cfg.SpoolEntries, cfg.SpoolDiskBytes = 500, 1, 2800
	s := newStore(t, cfg)
	for i := range 2 {
		id := fmt.Sprintf("big%d", i)
		e := Entry{TaskID: id, Status: "SUCCESS", Terminal: true, Body: make([]byte, 1000), Substitute: rec(id, "SUCCESS"), ReplyTo: "r"}
		if err := s.Put(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.Stats(); st.Held != 2 || st.Full {
		t.Fatalf("stats %+v, want two held", st)
	}
	fb.set(func(f *fakeBroker) { f.down = true })
	putN(t, s, "p", 1, 450, "r")
	st := s.Stats()
	if st.Pending != 1 || st.MemoryOnly != 0 || st.Evicted != 1 || st.Held != 1 || st.Full {
		t.Fatalf("stats %+v, want the pending record on disk in place of one held record", st)
	}
}

// TestDiskWriteErrorKeepsRecord: records the disk refuses stay in memory
// whatever the memory bound for copies (counted, logged), and Run writes
// them once the disk takes them again.
func TestDiskWriteErrorKeepsRecord(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spool")
	fb := newFakeBroker()
	fb.down = true
	logs := &logBuf{}
	cfg := testConfig(fb)
	cfg.DataDir, cfg.MemoryOnly = dir, false
	cfg.SpoolEntries = 3
	cfg.Logger = slogTo(logs)
	s := newStore(t, cfg)
	breakDir(t, dir)
	putN(t, s, "t", 2, 0, "r")
	st := s.Stats()
	if st.Pending != 2 || st.Dropped != 0 || st.MemoryOnly != 2 || st.DiskErrors != 2 || st.Full {
		t.Fatalf("stats %+v, want 2 pending in memory only, 2 disk errors, not full", st)
	}
	if !strings.Contains(logs.String(), "disk write failed") {
		t.Errorf("disk failure not logged:\n%s", logs)
	}
	repairDir(t, dir)
	runStore(t, s)
	waitFor(t, "the records written to disk", func() bool { return s.Stats().MemoryOnly == 0 })
	if files, _ := filepath.Glob(filepath.Join(dir, "*.rec")); len(files) != 2 {
		t.Errorf("%d files, want 2", len(files))
	}
	fb.set(func(f *fakeBroker) { f.down = false })
	waitFor(t, "replay", func() bool { return s.Stats().Pending == 0 })
	if n := len(fb.eventBodies("r")); n != 2 {
		t.Errorf("replayed %d, want 2", n)
	}
}

// breakDir replaces the spool directory with a file: spool writes fail.
func breakDir(t *testing.T, dir string) {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

func repairDir(t *testing.T, dir string) {
	t.Helper()
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
}

// TestReplayReadError: a record whose file cannot be read for now (here a
// directory stands in its place) stays pending and is replayed once the
// file reads again; one whose file is corrupt is set aside as *.bad.
func TestReplayReadError(t *testing.T) {
	dir := t.TempDir()
	fb := newFakeBroker()
	fb.down = true
	cfg := testConfig(fb)
	cfg.DataDir, cfg.MemoryOnly = dir, false
	s1 := newStore(t, cfg)
	putN(t, s1, "t", 2, 0, "r")
	if err := s1.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, cfg) // the bodies are on disk only
	files, _ := filepath.Glob(filepath.Join(dir, "*.rec"))
	if len(files) != 2 {
		t.Fatalf("files %v", files)
	}
	unreadable, corrupt := files[0], files[1]
	if err := os.Rename(unreadable, unreadable+".aside"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(unreadable, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(corrupt, []byte("{}\ngarbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	fb.set(func(f *fakeBroker) { f.down = false })
	s.replayPass(context.Background())
	st := s.Stats()
	if st.Pending != 1 || st.Dropped != 1 || st.DiskErrors != 1 {
		t.Fatalf("stats %+v, want the unreadable record pending, the corrupt one dropped", st)
	}
	if bad, _ := filepath.Glob(filepath.Join(dir, "*.bad")); len(bad) != 1 {
		t.Errorf("bad files %v, want the corrupt one", bad)
	}
	if err := os.Remove(unreadable); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(unreadable+".aside", unreadable); err != nil {
		t.Fatal(err)
	}
	runStore(t, s)
	waitFor(t, "replay", func() bool { return s.Stats().Pending == 0 })
	if got := fb.eventBodies("r"); !slices.Equal(got, []string{string(rec("t0", "SUCCESS"))}) {
		t.Errorf("replayed %q, want t0", got)
	}
}

// TestCloseFlushesMemoryOnlyRecords: a record the disk refused at spool time
// is written by Close, and the next process replays it.
func TestCloseFlushesMemoryOnlyRecords(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spool")
	fb := newFakeBroker()
	fb.down = true
	logs := &logBuf{}
	cfg := testConfig(fb)
	cfg.DataDir, cfg.MemoryOnly = dir, false
	cfg.Logger = slogTo(logs)
	s := newStore(t, cfg)
	// Break the directory: spool writes fail, the record stays in memory.
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	body := rec("t1", "SUCCESS")
	if err := s.Put(context.Background(), Entry{TaskID: "t1", Terminal: true, Body: body}); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.DiskErrors != 1 || st.Pending != 1 {
		t.Fatalf("stats %+v, want one disk error, one pending", st)
	}
	if !strings.Contains(logs.String(), "kept in memory") {
		t.Errorf("disk failure not logged:\n%s", logs)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s2 := newStore(t, cfg)
	if got, ok := s2.Get("t1"); !ok || string(got) != string(body) {
		t.Fatalf("after restart Get = %q %v", got, ok)
	}
	fb.set(func(f *fakeBroker) { f.down = false })
	runStore(t, s2)
	waitFor(t, "replay", func() bool { return s2.Stats().Pending == 0 })
	if got := fb.queue("rayserve-result-t1"); !slices.Equal(got, []string{string(body)}) {
		t.Errorf("channel = %q", got)
	}
}

// TestDiskBoundCloseReportsMemoryOnly: records past SpoolDiskBytes stay in
// memory, and Close reports that they could not be kept.
func TestDiskBoundCloseReportsMemoryOnly(t *testing.T) {
	fb := newFakeBroker()
	fb.down = true
	logs := &logBuf{}
	cfg := testConfig(fb)
	cfg.DataDir, cfg.MemoryOnly = t.TempDir(), false
	cfg.SpoolDiskBytes = 2800 // room for two records of 1000 bytes (~1150 on disk)
	cfg.Logger = slogTo(logs)
	s := newStore(t, cfg)
	putN(t, s, "t", 3, 1000, "r")
	if files, _ := filepath.Glob(filepath.Join(cfg.DataDir, "*.rec")); len(files) != 2 {
		t.Errorf("%d files, want 2", len(files))
	}
	if !strings.Contains(logs.String(), "disk spool full") {
		t.Errorf("no log of the full disk:\n%s", logs)
	}
	if err := s.Close(context.Background()); !errors.Is(err, ErrNotFlushed) {
		t.Errorf("Close = %v, want ErrNotFlushed", err)
	}
}
