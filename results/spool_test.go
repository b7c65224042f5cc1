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
	cfg.DataDir = dir
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
	cfg2.DataDir = dir
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
	cfg.DataDir = dir
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
				cfg.DataDir = t.TempDir()
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

// TestSpoolOverflow: without a data dir the oldest records are dropped from
// memory (logged, counted); with one the disk keeps them all.
func TestSpoolOverflow(t *testing.T) {
	for _, dataDir := range []bool{false, true} {
		t.Run(fmt.Sprintf("data dir %v", dataDir), func(t *testing.T) {
			fb := newFakeBroker()
			fb.down = true
			logs := &logBuf{}
			cfg := testConfig(fb)
			cfg.Logger = slogTo(logs)
			cfg.SpoolEntries = 3
			if dataDir {
				cfg.DataDir = t.TempDir()
			}
			s := newStore(t, cfg)
			for i := range 5 {
				id := fmt.Sprintf("t%d", i)
				_ = s.Put(context.Background(), Entry{TaskID: id, Terminal: true, Body: rec(id, "SUCCESS"), ReplyTo: "r"})
			}
			st := s.Stats()
			wantPending, wantDropped := 3, uint64(2)
			if dataDir {
				wantPending, wantDropped = 5, 0
			}
			if st.Pending != wantPending || st.Dropped != wantDropped {
				t.Fatalf("pending %d dropped %d, want %d %d", st.Pending, st.Dropped, wantPending, wantDropped)
			}
			// The recent cache took each record as Put began, so lookups
			// still find a record whose delivery the memory spool dropped.
			if _, ok := s.Get("t0"); !ok {
				t.Errorf("Get(oldest) found nothing; the recent cache should answer for it")
			}
			if !dataDir && strings.Count(logs.String(), "result record lost") != 2 {
				t.Errorf("want two loud losses in the log:\n%s", logs)
			}
			runStore(t, s)
			fb.set(func(f *fakeBroker) { f.down = false })
			waitFor(t, "replay", func() bool { return s.Stats().Pending == 0 })
			if n := len(fb.eventBodies("r")); n != wantPending {
				t.Errorf("replayed %d, want %d", n, wantPending)
			}
		})
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
	cfg.DataDir = dir
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
	if !strings.Contains(logs.String(), "kept in memory only") {
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

// TestDiskBound: past SpoolDiskBytes records stay in memory (logged), and
// Close reports that they could not be kept.
func TestDiskBound(t *testing.T) {
	fb := newFakeBroker()
	fb.down = true
	logs := &logBuf{}
	cfg := testConfig(fb)
	cfg.DataDir = t.TempDir()
	cfg.SpoolDiskBytes = 2800 // room for two records of 1000 bytes (~1150 on disk)
	cfg.Logger = slogTo(logs)
	s := newStore(t, cfg)
	for i := range 3 {
		id := fmt.Sprintf("t%d", i)
		_ = s.Put(context.Background(), Entry{TaskID: id, Terminal: true, Body: make([]byte, 1000), ReplyTo: "r"})
	}
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
