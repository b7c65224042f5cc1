package results

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
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
// broker does not classify) does not stop the others from being replayed.
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
