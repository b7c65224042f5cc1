package results

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// flushStore is a disk-spooled store whose replay, after the broker was
// away, waits a minute (far longer than the flushes below allow) until
// Flush is called, 5 ms after.
func flushStore(t *testing.T, fb *fakeBroker, dir string) *Store {
	cfg := testConfig(fb)
	cfg.MemoryOnly, cfg.DataDir = false, dir
	cfg.ReplayBackoff, cfg.ReplayBackoffMax, cfg.FlushRetry = time.Minute, time.Minute, 5*time.Millisecond
	return newStore(t, cfg)
}

func putTerminal(t *testing.T, s *Store, n int) {
	t.Helper()
	for i := range n {
		id := fmt.Sprintf("t%d", i)
		if err := s.Put(context.Background(), Entry{TaskID: id, Status: "SUCCESS", Terminal: true, Body: rec(id, "SUCCESS"), ReplyTo: "replies"}); err != nil {
			t.Fatal(err)
		}
	}
}

// Records spooled while the broker refused them, the broker back, then the
// stop's Flush: every record reaches the broker before Flush returns, even
// though the replay was backing off (a minute) when the broker came back.
func TestFlushWaitsForTheBroker(t *testing.T) {
	fb := newFakeBroker()
	fb.down = true
	s := flushStore(t, fb, t.TempDir())
	putTerminal(t, s, 20)
	stop := runStore(t, s)
	waitFor(t, "a replay pass meeting the broker away", func() bool {
		var n int
		fb.get(func(f *fakeBroker) { n = f.calls })
		return n > 20*4 // the Puts' tries, then the replay's
	})
	fb.set(func(f *fakeBroker) { f.down = false })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if st := s.Stats(); st.Pending != 0 || st.Replayed != 20 {
		t.Fatalf("after Flush: stats %+v, want 0 pending, 20 replayed", st)
	}
	if got := fb.eventBodies("replies"); len(got) != 20 {
		t.Fatalf("broker holds %d records, want 20", len(got))
	}
	stop()
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// A broker still away: Flush gives up when its ctx ends, says how many
// records wait, and they stay on the data dir, where the next process
// finds them.
func TestFlushBoundedLeavesRecordsOnDisk(t *testing.T) {
	fb := newFakeBroker()
	fb.down = true
	dir := t.TempDir()
	s := flushStore(t, fb, dir)
	putTerminal(t, s, 7)
	stop := runStore(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := s.Flush(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "7 records still wait") {
		t.Fatalf("Flush: %v, want the deadline and 7 records waiting", err)
	}
	stop()
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v (the records are on disk)", err)
	}
	next := flushStore(t, newFakeBroker(), dir)
	if st := next.Stats(); st.Pending != 7 {
		t.Fatalf("next process's spool: %+v, want 7 pending", st)
	}
}
