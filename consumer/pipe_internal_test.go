package consumer

import (
	"testing"
	"time"
)

type meterStub struct {
	busy  time.Duration
	slots int
	rows  int64
}

func (m *meterStub) Busy() (time.Duration, int) { return m.busy, m.slots }
func (m *meterStub) Rows() int64                { return m.rows }

// TestPipeCtl walks the pipelining decision through windows: each step
// is a window's busy share and rows per second, a time, and the way wanted
// after it.
func TestPipeCtl(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	type step struct {
		at          time.Duration
		share, rate float64
		on          bool
		switch_     bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"a broker-bound queue is never tried", []step{
			{0, 0.1, 100, false, false}, {time.Hour, 0.2, 200, false, false},
		}},
		{"a device-bound queue tries pipelining and keeps it when it serves more rows", []step{
			{-time.Second, 0.9, 700, false, false},                // the first window: no measure
			{0, 0.8, 700, true, true},                             // trial
			{2 * time.Second, 0.97, 900, true, false},             // won: kept
			{4 * time.Second, 0.97, 900, true, false},             // no recheck before pipeRecheck
			{2*time.Second + pipeRecheck, 0.97, 900, false, true}, // recheck: direct on trial
			{4*time.Second + pipeRecheck, 0.8, 700, true, true},   // direct lost: back
		}},
		// On an accelerator with a fixed cost per run the device is busy
		// all the time either way; the serial cycle shows only in the rows
		// per run (issue 23 item 3: 0.98 and 0.99 busy, 44 and 56 rows of
		// 64 per batch). Judged by the busy share, this pipeline lost.
		{"a device busy either way keeps the pipeline that serves more rows", []step{
			{-time.Second, 0.98, 700, false, false},
			{0, 0.98, 700, true, true},
			{2 * time.Second, 0.99, 870, true, false},
		}},
		{"a busier device that serves fewer rows drops the pipeline", []step{
			{-time.Second, 0.9, 900, false, false},
			{0, 0.9, 900, true, true},
			{2 * time.Second, 0.99, 850, false, true},
		}},
		{"a pipeline that does not win by the margin is dropped, and tried again later and later", []step{
			{-time.Second, 0.8, 800, false, false},
			{0, 0.8, 800, true, true},
			{2 * time.Second, 0.82, 820, false, true}, // not by pipeMargin: back to direct
			{3 * time.Second, 0.8, 800, false, false}, // backing off
			{2*time.Second + pipeBackoff, 0.8, 800, true, true},
			{4*time.Second + pipeBackoff, 0.3, 300, false, true}, // lost again: backoff doubles
			{5*time.Second + pipeBackoff, 0.8, 800, false, false},
			{4*time.Second + 3*pipeBackoff - time.Millisecond, 0.8, 800, false, false},
			{4*time.Second + 3*pipeBackoff, 0.8, 800, true, true},
		}},
		{"a kept pipeline is given up at once on a light queue", []step{
			{-time.Second, 0.8, 800, false, false},
			{0, 0.8, 800, true, true},
			{2 * time.Second, 0.97, 970, true, false},
			{3 * time.Second, 0.01, 10, false, true},
			{4 * time.Second, 0.6, 600, false, false}, // busy again: one window to measure
			{5 * time.Second, 0.6, 600, true, true},   // then tried
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c pipeCtl
			for i, s := range tc.steps {
				sw := c.step(at(s.at), pipeSample{share: s.share, rate: s.rate}, pipeSettle)
				if c.on != s.on || sw != s.switch_ {
					t.Fatalf("step %d (at %v, share %v, rate %v): on %v, switched %v; want %v, %v", i, s.at, s.share, s.rate, c.on, sw, s.on, s.switch_)
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
	a.rows, b.rows = 3000, 2000
	// Over 10 s: a ran 1 s of it on one slot, b 8 s on two slots: 0.4;
	// 5,000 rows together: 500 a second.
	ps, ok := pm.sample(t0.Add(10*time.Second), []busyMeter{a, b}, pipeWindow)
	if !ok || ps.share < 0.399 || ps.share > 0.401 || ps.rate < 499.9 || ps.rate > 500.1 {
		t.Fatalf("sample = %+v, %v; want share 0.4 (the larger of 0.1 and 0.8/2), rate 500", ps, ok)
	}
	share := ps.share
	// A batcher first seen now counts from the next window on.
	c := &meterStub{busy: time.Hour, slots: 1}
	a.busy += 10 * time.Second
	ps, ok = pm.sample(t0.Add(20*time.Second), []busyMeter{a, b, c}, pipeWindow)
	if share = ps.share; !ok || share < 0.999 || share > 1.001 {
		t.Fatalf("share = %v, %v; want 1 (a busy all along; c new)", share, ok)
	}
	// restart drops what ran before it.
	a.busy += time.Second
	pm.restart(t0.Add(30*time.Second), []busyMeter{a})
	a.busy += 5 * time.Second
	ps, ok = pm.sample(t0.Add(40*time.Second), []busyMeter{a}, pipeWindow)
	if share = ps.share; !ok || share < 0.499 || share > 0.501 {
		t.Fatalf("share after restart = %v, %v; want 0.5", share, ok)
	}
}
