package results

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestReplayAfterBrokerReturns spools records while the broker is away and
// checks the replay writes exactly them, in order per task, once it is back.
func TestReplayAfterBrokerReturns(t *testing.T) {
	fb := newFakeBroker()
	fb.down = true
	s := newStore(t, testConfig(fb))
	ctx := context.Background()
	var want []string
	for i := range 5 {
		id := fmt.Sprintf("t%d", i)
		for _, st := range []string{"STARTED", "SUCCESS"} {
			body := rec(id, st)
			want = append(want, string(body))
			if err := s.Put(ctx, Entry{TaskID: id, Status: st, Terminal: st == "SUCCESS", Body: body, ReplyTo: "replies"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if st := s.Stats(); st.Pending != 10 || st.Spooled != 10 {
		t.Fatalf("stats %+v, want 10 pending", st)
	}
	runStore(t, s)
	// Let the replay meet the broker down at least twice (backing off).
	waitFor(t, "failed replay passes", func() bool {
		var n int
		fb.get(func(f *fakeBroker) { n = f.calls })
		return n >= 10*4+2
	})
	fb.set(func(f *fakeBroker) { f.down = false })
	waitFor(t, "empty spool", func() bool { return s.Stats().Pending == 0 })

	got := fb.eventBodies("replies")
	if len(got) != len(want) {
		t.Fatalf("replayed %d records, want %d: %q", len(got), len(want), got)
	}
	for i := range 5 {
		id := fmt.Sprintf(`"t%d"`, i)
		var order []string
		for _, b := range got {
			if strings.Contains(b, id) {
				order = append(order, b)
			}
		}
		wantOrder := []string{string(rec(fmt.Sprintf("t%d", i), "STARTED")), string(rec(fmt.Sprintf("t%d", i), "SUCCESS"))}
		if !slices.Equal(order, wantOrder) {
			t.Errorf("task %s replayed %q, want %q", id, order, wantOrder)
		}
	}
	if st := s.Stats(); st.Replayed != 10 {
		t.Errorf("replayed = %d, want 10", st.Replayed)
	}
	if got, _ := s.Get("t3"); !strings.Contains(string(got), "SUCCESS") {
		t.Errorf("Get after replay = %s", got)
	}
}

// TestPutQueuesBehindSpooledRecords: a task with a spooled record has its
// next record spooled behind it even though the broker answers again.
func TestPutQueuesBehindSpooledRecords(t *testing.T) {
	fb := newFakeBroker()
	fb.down = true
	s := newStore(t, testConfig(fb))
	ctx := context.Background()
	first, second := rec("t1", "STARTED"), rec("t1", "SUCCESS")
	_ = s.Put(ctx, Entry{TaskID: "t1", Status: "STARTED", Body: first, ReplyTo: "r"})
	fb.set(func(f *fakeBroker) { f.down = false })
	_ = s.Put(ctx, Entry{TaskID: "t1", Status: "SUCCESS", Terminal: true, Body: second, ReplyTo: "r"})
	if n := len(fb.eventBodies("r")); n != 0 {
		t.Fatalf("second record overtook the spooled one: %d events", n)
	}
	runStore(t, s)
	waitFor(t, "replay", func() bool { return s.Stats().Pending == 0 })
	if got := fb.eventBodies("r"); !slices.Equal(got, []string{string(first), string(second)}) {
		t.Errorf("events %q, want STARTED then SUCCESS", got)
	}
}

// TestReplayNotHeldBackByOneRecord: a record that keeps failing (an error the
// broker does not classify, not the broker away) does not stop the others
// from being replayed.
func TestReplayNotHeldBackByOneRecord(t *testing.T) {
	fb := newFakeBroker()
	fb.down = true
	cfg := testConfig(fb)
	cfg.ReplayConcurrency = 1
	s := newStore(t, cfg)
	ctx := context.Background()
	_ = s.Put(ctx, Entry{TaskID: "bad", Terminal: true, Body: rec("bad", "SUCCESS"), ReplyTo: "broken"})
	for i := range 3 {
		id := fmt.Sprintf("t%d", i)
		_ = s.Put(ctx, Entry{TaskID: id, Terminal: true, Body: rec(id, "SUCCESS"), ReplyTo: "r"})
	}
	fb.set(func(f *fakeBroker) { f.down, f.failCh = false, "broken" })
	runStore(t, s)
	waitFor(t, "the good records", func() bool { return s.Stats().Pending == 1 })
	if n := len(fb.eventBodies("r")); n != 3 {
		t.Errorf("replayed %d, want 3", n)
	}
	fb.set(func(f *fakeBroker) { f.failCh = "" })
	waitFor(t, "the bad record once its channel works", func() bool { return s.Stats().Pending == 0 })
}

// TestReplayMovesPastFailingTasks: a run of tasks at the head of the spool
// that keep failing on their own (more than ReplayConcurrency) does not
// stop the pass before the good records behind them; each failing task then
// waits its own backoff instead of being tried again at once.
func TestReplayMovesPastFailingTasks(t *testing.T) {
	fb := newFakeBroker()
	fb.down = true
	cfg := testConfig(fb)
	cfg.ReplayConcurrency = 2
	cfg.ReplayBackoff, cfg.ReplayBackoffMax = time.Hour, time.Hour
	s := newStore(t, cfg)
	putN(t, s, "bad", 6, 0, "broken")
	putN(t, s, "good", 3, 0, "r")
	fb.set(func(f *fakeBroker) { f.down, f.failCh = false, "broken" })
	if away := s.replayPass(context.Background()); away {
		t.Error("the pass took failing tasks for the broker away")
	}
	if n := len(fb.eventBodies("r")); n != 3 {
		t.Fatalf("good records replayed %d, want 3", n)
	}
	var tries int
	fb.get(func(f *fakeBroker) { tries = f.writeFail["broken"] })
	if tries != 6 {
		t.Errorf("failing tasks tried %d times, want once each", tries)
	}
	s.replayPass(context.Background())
	fb.get(func(f *fakeBroker) { tries = f.writeFail["broken"] })
	if tries != 6 {
		t.Errorf("failing tasks tried again before their backoff: %d tries", tries)
	}
	if st := s.Stats(); st.Pending != 6 || st.Dropped != 0 {
		t.Errorf("stats %+v, want the 6 failing records still pending", st)
	}
}

// TestReplayMovesPastRefusals: records the broker refuses for good at the
// head of the spool become undeliverable (counted, readable by Get, kept on
// disk across a restart, never sent again) and the records behind them are
// replayed in the same pass.
func TestReplayMovesPastRefusals(t *testing.T) {
	dir := t.TempDir()
	fb := newFakeBroker()
	fb.down = true
	cfg := testConfig(fb)
	cfg.DataDir, cfg.MemoryOnly = dir, false
	cfg.ReplayConcurrency = 2
	s := newStore(t, cfg)
	putN(t, s, "bad", 20, 0, "bad channel")
	putN(t, s, "good", 3, 0, "r")
	fb.set(func(f *fakeBroker) { f.down, f.failCh, f.failChErr = false, "bad channel", errBadChannel })
	if away := s.replayPass(context.Background()); away {
		t.Error("the pass took refusals for the broker away")
	}
	if n := len(fb.eventBodies("r")); n != 3 {
		t.Fatalf("good records replayed %d, want 3", n)
	}
	st := s.Stats()
	if st.Pending != 0 || st.Undeliverable != 20 || st.Parked != 20 || st.Held != 0 {
		t.Fatalf("stats %+v, want 20 undeliverable, none pending", st)
	}
	if got, ok := s.Get("bad7"); !ok || string(got) != string(rec("bad7", "SUCCESS")) {
		t.Errorf("Get(bad7) = %q %v, want the record", got, ok)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*"+extUndeliverable)); len(files) != 20 {
		t.Errorf("%d undeliverable files, want 20", len(files))
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	fb2 := newFakeBroker()
	cfg2 := cfg
	cfg2.Broker = fb2
	s2 := newStore(t, cfg2)
	if st := s2.Stats(); st.Undeliverable != 20 || st.Pending != 0 {
		t.Fatalf("after restart %+v, want 20 undeliverable, none pending", st)
	}
	if got, ok := s2.Get("bad7"); !ok || string(got) != string(rec("bad7", "SUCCESS")) {
		t.Errorf("after restart Get(bad7) = %q %v", got, ok)
	}
	s2.replayPass(context.Background())
	if ops := fb2.opsOf(""); len(ops) != 0 {
		t.Errorf("undeliverable records sent again: %v", ops)
	}
}

// TestReplayPassStopsWhileBrokerAway: a broker that is away stops the pass
// after the tasks already started; Run waits its backoff.
func TestReplayPassStopsWhileBrokerAway(t *testing.T) {
	fb := newFakeBroker()
	fb.down = true
	cfg := testConfig(fb)
	cfg.ReplayConcurrency = 4
	s := newStore(t, cfg)
	putN(t, s, "t", 50, 0, "r")
	var before int
	fb.get(func(f *fakeBroker) { before = f.calls })
	if away := s.replayPass(context.Background()); !away {
		t.Error("the pass did not see the broker away")
	}
	var calls int
	fb.get(func(f *fakeBroker) { calls = f.calls - before })
	if calls < 1 || calls > cfg.ReplayConcurrency {
		t.Errorf("%d broker calls in the pass, want at most the %d tasks in flight", calls, cfg.ReplayConcurrency)
	}
}
