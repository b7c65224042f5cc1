package crash

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// fullDisk is JournalConfig.WrapWriter for a disk that fills up, as ext4
// or XFS do: while full, a write that would grow a file writes what fits
// (partial bytes, the rest of the block) and fails with ENOSPC; a write
// over bytes the file already holds needs no new space and succeeds,
// unless cow (a copy-on-write file system: every write needs space).
type fullDisk struct {
	mu      sync.Mutex
	full    bool
	cow     bool
	partial int // bytes a refused growing write still writes
	refused int // writes refused
}

func (d *fullDisk) set(full, cow bool) {
	d.mu.Lock()
	d.full, d.cow = full, cow
	d.mu.Unlock()
}

func (d *fullDisk) wrap(w io.WriterAt) io.WriterAt { return diskWriter{d, w} }

type diskWriter struct {
	d *fullDisk
	w io.WriterAt
}

func (w diskWriter) WriteAt(p []byte, off int64) (int, error) {
	w.d.mu.Lock()
	defer w.d.mu.Unlock()
	if !w.d.full {
		return w.w.WriteAt(p, off)
	}
	size := int64(-1)
	if f, ok := w.w.(*os.File); ok {
		if st, err := f.Stat(); err == nil {
			size = st.Size()
		}
	}
	if !w.d.cow && size >= 0 && off+int64(len(p)) <= size {
		return w.w.WriteAt(p, off) // over bytes the file holds: no new space
	}
	w.d.refused++
	n := min(w.d.partial, len(p))
	if n > 0 {
		if _, err := w.w.WriteAt(p[:n], off); err != nil {
			return 0, err
		}
	}
	return n, &os.PathError{Op: "write", Path: "journal", Err: syscall.ENOSPC}
}

func openFullDiskJournal(t *testing.T, dir string, d *fullDisk, logs io.Writer) *Journal {
	t.Helper()
	if logs == nil {
		logs = io.Discard
	}
	j, err := NewJournal(JournalConfig{Dir: dir, WrapWriter: d.wrap, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close() })
	return j
}

// A full data dir (issue 27 item 6): a crash is counted only for a run
// whose start was recorded and whose end was not. A run whose end could
// not be appended is not a crash after a restart (the end is marked in
// the bytes its start already took); a start that could not be written
// whole is not recorded (its torn bytes are cut off, and Start says so);
// nothing that failed damages the lines written after the disk has room.
func TestJournalFullDisk(t *testing.T) {
	ids := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s-%02d", prefix, i)
		}
		return out
	}
	noCrashes := func(t *testing.T, j *Journal, ids ...string) {
		t.Helper()
		for _, id := range ids {
			if n := j.Crashes(id); n != 0 {
				t.Errorf("Crashes(%s) = %d after a restart, want 0: its run ended", id, n)
			}
		}
		if r := j.Recovered(); len(r) != 0 {
			t.Errorf("crash report after a restart: %v, want none", r)
		}
	}
	t.Run("end not appended", func(t *testing.T) {
		dir, d := t.TempDir(), &fullDisk{partial: 3}
		j := openFullDiskJournal(t, dir, d, nil)
		tasks := ids("succeeded", 29)
		for _, id := range tasks {
			if err := j.Start(id); err != nil {
				t.Fatal(err)
			}
		}
		d.set(true, false) // the disk fills while they run
		for _, id := range tasks {
			j.Done(id)
		}
		noCrashes(t, crashAndReopen(t, j, dir), tasks...)
	})
	t.Run("start torn", func(t *testing.T) {
		dir, d := t.TempDir(), &fullDisk{partial: 9} // `S "a"\nS "` of two lines
		j := openFullDiskJournal(t, dir, d, nil)
		d.set(true, false)
		if err := j.Start("a", "b"); err == nil {
			t.Fatal("Start on a full disk: no error")
		}
		// The process dies running them: their start was not recorded.
		noCrashes(t, crashAndReopen(t, j, dir), "a", "b")
	})
	t.Run("lines after a torn start", func(t *testing.T) {
		dir, d := t.TempDir(), &fullDisk{partial: 4}
		var logs bytes.Buffer
		j := openFullDiskJournal(t, dir, d, &logs)
		d.set(true, false)
		_ = j.Start("lost")
		d.set(false, false) // room again
		if err := j.Start("ran", "crashed"); err != nil {
			t.Fatal(err)
		}
		j.Done("ran", "lost")
		j2 := crashAndReopenLogged(t, j, dir, &logs)
		if j2.Crashes("crashed") != 1 || j2.Crashes("ran") != 0 || j2.Crashes("lost") != 0 {
			t.Errorf("Crashes: crashed %d ran %d lost %d, want 1 0 0", j2.Crashes("crashed"), j2.Crashes("ran"), j2.Crashes("lost"))
		}
		if strings.Contains(logs.String(), "damaged") {
			t.Errorf("the torn start damaged the lines after it: %s", logs.String())
		}
	})
	t.Run("copy-on-write: the end waits for room", func(t *testing.T) {
		dir, d := t.TempDir(), &fullDisk{partial: 1}
		j := openFullDiskJournal(t, dir, d, nil)
		tasks := ids("ran", 5)
		if err := j.Start(tasks...); err != nil {
			t.Fatal(err)
		}
		d.set(true, true) // no write at all succeeds
		j.Done(tasks...)
		d.set(false, false)
		if err := j.Start("next"); err != nil { // the ends are written first
			t.Fatal(err)
		}
		j.Done("next")
		noCrashes(t, crashAndReopen(t, j, dir), append(tasks, "next")...)
	})
	t.Run("carried count forgotten on a full disk", func(t *testing.T) {
		dir, d := t.TempDir(), &fullDisk{partial: 2}
		j := openFullDiskJournal(t, dir, d, nil)
		if err := j.Start("crashed-once"); err != nil {
			t.Fatal(err)
		}
		j = crashAndReopen(t, j, dir)
		j.Close()
		j = openFullDiskJournal(t, dir, d, nil)
		if j.Crashes("crashed-once") != 1 {
			t.Fatalf("Crashes = %d, want 1", j.Crashes("crashed-once"))
		}
		if err := j.Start("crashed-once"); err != nil {
			t.Fatal(err)
		}
		d.set(true, false)
		j.Done("crashed-once") // succeeded this time: the count goes
		noCrashes(t, crashAndReopen(t, j, dir), "crashed-once")
	})
}

// crashAndReopenLogged is crashAndReopen with the new journal logging to
// logs.
func crashAndReopenLogged(t *testing.T, j *Journal, dir string, logs io.Writer) *Journal {
	t.Helper()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j2, err := NewJournal(JournalConfig{Dir: dir, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	t.Cleanup(func() { _ = j2.Close() })
	return j2
}

// While the disk refuses the journal's writes, it says so once (a
// rate-limited warning, not a line per task), counts the failures and
// reports itself failing (Stats: /readyz and a metric); once a write
// succeeds it says so, reports healthy, and the next outage is warned of
// at once. Without tasks, Stats retries (a probe that leaves no line), so
// the journal turns healthy when the disk has room again.
func TestJournalFullDiskWarnsOnce(t *testing.T) {
	dir, d := t.TempDir(), &fullDisk{partial: 5}
	var logs bytes.Buffer
	j := openFullDiskJournal(t, dir, d, &logs)
	if st := j.Stats(); st.Failing || st.WriteErrors != 0 {
		t.Fatalf("a fresh journal: %+v", st)
	}
	d.set(true, false)
	for i := range 200 {
		id := fmt.Sprintf("task-%d", i)
		if err := j.Start(id); err == nil {
			t.Fatal("Start on a full disk: no error")
		}
		j.Done(id)
	}
	st := j.Stats()
	if !st.Failing || st.WriteErrors < 200 {
		t.Errorf("after 200 refused starts: %+v, want failing with at least 200 errors", st)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Errorf("%d warnings for 200 refused writes, want 1:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("an ERROR line for a full disk:\n%s", logs.String())
	}
	d.set(false, false)
	j.probeEvery = 0 // the test's clock: probe at once
	if st := j.Stats(); st.Failing {
		t.Errorf("the disk has room and no task came: %+v, want healthy after a probe", st)
	}
	if !strings.Contains(logs.String(), "written again") {
		t.Errorf("no line saying the journal is written again:\n%s", logs.String())
	}
	d.set(true, false)
	_ = j.Start("again")
	if n := strings.Count(logs.String(), "level=WARN"); n != 2 {
		t.Errorf("the second outage: %d warnings in all, want 2:\n%s", n, logs.String())
	}
	d.set(false, false)
	j.Done("again")
	j2 := crashAndReopenLogged(t, j, dir, &logs)
	if r := j2.Recovered(); len(r) != 0 {
		t.Errorf("crash counts after the outages: %v, want none", r)
	}
	if strings.Contains(logs.String(), "damaged") {
		t.Errorf("the probes left lines:\n%s", logs.String())
	}
}

// A disk full when the journal opens: the process still starts (its
// rewrite is retried, the old file left as it is, so the crashes it holds
// still count), the journal fails until the disk has room, then records
// starts again.
func TestJournalFullDiskAtOpen(t *testing.T) {
	dir, d := t.TempDir(), &fullDisk{partial: 7}
	j := openFullDiskJournal(t, dir, d, nil)
	if err := j.Start("crashed-before"); err != nil {
		t.Fatal(err)
	}
	j.Close()
	d.set(true, false)
	var logs bytes.Buffer
	j = openFullDiskJournal(t, dir, d, &logs)
	if !j.Stats().Failing || !strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("a journal that could not rewrite its file at open: %+v, logs %s", j.Stats(), logs.String())
	}
	if j.Crashes("crashed-before") != 1 {
		t.Errorf("Crashes(crashed-before) = %d, want 1 (read before the rewrite)", j.Crashes("crashed-before"))
	}
	if err := j.Start("unrecorded"); err == nil {
		t.Error("Start without a file: no error")
	}
	d.set(false, false)
	j.probeEvery = 0
	if j.Stats().Failing {
		t.Fatal("the disk has room: still failing after a probe")
	}
	if err := j.Start("recorded"); err != nil {
		t.Fatal(err)
	}
	j = crashAndReopen(t, j, dir)
	for id, want := range map[string]int{"crashed-before": 1, "unrecorded": 1, "recorded": 1} {
		// "unrecorded" was still running at the rewrite: recorded then.
		if got := j.Crashes(id); got != want {
			t.Errorf("Crashes(%s) = %d, want %d", id, got, want)
		}
	}
}
