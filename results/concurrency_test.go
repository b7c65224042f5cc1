package results

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
)

// TestConcurrentPut stores from 64 goroutines through a flaky broker and
// checks that every record arrives once the replay is done.
func TestConcurrentPut(t *testing.T) {
	fb := newFakeBroker()
	var n int
	fb.onCall = func() {
		fb.mu.Lock()
		n++
		if n%7 == 0 {
			fb.failNext = 4 // enough to exhaust one Put's retries now and then
		}
		fb.mu.Unlock()
	}
	cfg := testConfig(fb)
	cfg.DataDir, cfg.MemoryOnly = t.TempDir(), false
	cfg.RemoveConcurrency = 8
	s := newStore(t, cfg)
	runStore(t, s)
	const workers, per = 64, 8
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				id := fmt.Sprintf("w%d-%d", w, i)
				e := Entry{TaskID: id, Status: "SUCCESS", Terminal: true, Body: rec(id, "SUCCESS")}
				if i%2 == 0 {
					e.ReplyTo = fmt.Sprintf("r%d", w%4)
				}
				if err := s.Put(context.Background(), e); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	waitFor(t, "replay", func() bool { return s.Stats().Pending == 0 })
	for w := range workers {
		for i := range per {
			id := fmt.Sprintf("w%d-%d", w, i)
			body := string(rec(id, "SUCCESS"))
			if i%2 == 0 {
				if !slices.Contains(fb.eventBodies(fmt.Sprintf("r%d", w%4)), body) {
					t.Errorf("%s missing from its reply channel", id)
				}
			} else if got := fb.queue("rayserve-result-" + id); !slices.Equal(got, []string{body}) {
				t.Errorf("%s channel = %q", id, got)
			}
		}
	}
	if maxRecv := func() int { fb.mu.Lock(); defer fb.mu.Unlock(); return fb.maxRecv }(); maxRecv > 8 {
		t.Errorf("%d removals in flight, bound is 8", maxRecv)
	}
	t.Logf("stats %+v", s.Stats())
}

// TestRemovalsDoNotBlockOthers: removals waiting on empty channels hold
// neither other tasks nor more than RemoveConcurrency receives.
func TestRemovalsDoNotBlockOthers(t *testing.T) {
	fb := newFakeBroker()
	release := make(chan struct{})
	fb.block = release
	cfg := testConfig(fb)
	cfg.RemoveConcurrency = 4
	s := newStore(t, cfg)
	var wg sync.WaitGroup
	for i := range 10 {
		id := fmt.Sprintf("c%d", i)
		wg.Go(func() {
			_ = s.Put(context.Background(), Entry{TaskID: id, Terminal: true, Body: rec(id, "SUCCESS")})
		})
	}
	waitFor(t, "four removals in flight", func() bool {
		var n int
		fb.get(func(f *fakeBroker) { n = f.receiving })
		return n == 4
	})
	// A reply-path task is not held up by the waiting removals.
	if err := s.Put(context.Background(), Entry{TaskID: "r1", Terminal: true, Body: rec("r1", "SUCCESS"), ReplyTo: "r"}); err != nil {
		t.Fatal(err)
	}
	if len(fb.eventBodies("r")) != 1 {
		t.Fatal("reply write did not go through while removals waited")
	}
	close(release)
	wg.Wait()
	fb.get(func(f *fakeBroker) {
		if f.maxRecv != 4 {
			t.Errorf("max removals in flight %d, want 4", f.maxRecv)
		}
	})
	for i := range 10 {
		if got := fb.queue(fmt.Sprintf("rayserve-result-c%d", i)); len(got) != 1 {
			t.Errorf("c%d channel = %q", i, got)
		}
	}
}
