package consumer

import (
	"testing"
	"time"
)

type meterStub struct {
	busy  time.Duration
	slots int
}

func (m *meterStub) Busy() (time.Duration, int) { return m.busy, m.slots }

// TestPipeCtl walks the pipelining decision through windows: each step
// is a window's busy share, a time, and the way wanted after it.
func TestPipeCtl(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	type step struct {
		at      time.Duration
		share   float64
		on      bool
		switch_ bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"a broker-bound queue is never tried", []step{
			{0, 0.1, false, false}, {time.Hour, 0.2, false, false},
		}},
		{"a device-bound queue tries pipelining and keeps it when busier", []step{
			{-time.Second, 0.9, false, false},                // the first window: no measure
			{0, 0.8, true, true},                             // trial
			{2 * time.Second, 0.97, true, false},             // won: kept
			{4 * time.Second, 0.97, true, false},             // no recheck before pipeRecheck
			{2*time.Second + pipeRecheck, 0.97, false, true}, // recheck: direct on trial
			{4*time.Second + pipeRecheck, 0.8, true, true},   // direct lost: back
		}},
		{"a pipeline that does not win by the margin is dropped, and tried again later and later", []step{
			{-time.Second, 0.8, false, false},
			{0, 0.8, true, true},
			{2 * time.Second, 0.82, false, true}, // not by pipeMargin: back to direct
			{3 * time.Second, 0.8, false, false}, // backing off
			{2*time.Second + pipeBackoff, 0.8, true, true},
			{4*time.Second + pipeBackoff, 0.3, false, true}, // lost again: backoff doubles
			{5*time.Second + pipeBackoff, 0.8, false, false},
			{4*time.Second + 3*pipeBackoff - time.Millisecond, 0.8, false, false},
			{4*time.Second + 3*pipeBackoff, 0.8, true, true},
		}},
		{"a kept pipeline is given up at once on a light queue", []step{
			{-time.Second, 0.8, false, false},
			{0, 0.8, true, true},
			{2 * time.Second, 0.97, true, false},
			{3 * time.Second, 0.01, false, true},
			{4 * time.Second, 0.6, false, false}, // busy again: one window to measure
			{5 * time.Second, 0.6, true, true},   // then tried
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c pipeCtl
			for i, s := range tc.steps {
				sw := c.step(at(s.at), s.share, pipeSettle)
				if c.on != s.on || sw != s.switch_ {
					t.Fatalf("step %d (at %v, share %v): on %v, switched %v; want %v, %v", i, s.at, s.share, c.on, sw, s.on, s.switch_)
				}
				if sw && !c.settle.Equal(at(s.at+pipeSettle)) {
					t.Errorf("step %d: settle until %v, want pipeSettle after the switch", i, c.settle)
				}
			}
		})
	}
}

func TestPipeMeterSample(t *testing.T) {
	a, b := &meterStub{slots: 1}, &meterStub{slots: 2}
	var pm pipeMeter
	t0 := time.Unix(1000, 0)
	if _, ok := pm.sample(t0, []busyMeter{a, b}, pipeWindow); ok {
		t.Fatal("the first sample gave a share: it only starts the window")
	}
	a.busy, b.busy = 100*time.Millisecond, 800*time.Millisecond
	if _, ok := pm.sample(t0.Add(pipeWindow/2), []busyMeter{a, b}, pipeWindow); ok {
		t.Fatal("a sample within pipeWindow gave a share")
	}
	a.busy, b.busy = a.busy*10, b.busy*10
	// Over 10 s: a ran 1 s of it on one slot, b 8 s on two slots: 0.4.
	share, ok := pm.sample(t0.Add(10*time.Second), []busyMeter{a, b}, pipeWindow)
	if !ok || share < 0.399 || share > 0.401 {
		t.Fatalf("share = %v, %v; want 0.4 (the larger of 0.1 and 0.8/2)", share, ok)
	}
	// A batcher first seen now counts from the next window on.
	c := &meterStub{busy: time.Hour, slots: 1}
	a.busy += 10 * time.Second
	share, ok = pm.sample(t0.Add(20*time.Second), []busyMeter{a, b, c}, pipeWindow)
	if !ok || share < 0.999 || share > 1.001 {
		t.Fatalf("share = %v, %v; want 1 (a busy all along; c new)", share, ok)
	}
	// restart drops what ran before it.
	a.busy += time.Second
	pm.restart(t0.Add(30*time.Second), []busyMeter{a})
	a.busy += 5 * time.Second
	share, ok = pm.sample(t0.Add(40*time.Second), []busyMeter{a}, pipeWindow)
	if !ok || share < 0.499 || share > 0.501 {
		t.Fatalf("share after restart = %v, %v; want 0.5", share, ok)
	}
}
