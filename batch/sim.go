package batch

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Latency is a simulated accelerator's time for one run of rows rows:
// Base + PerRow x rows. It is a capacity-planning tool: measured on a real
// device (`inferq bench --modes direct` at two batch sizes), it lets the
// rest of the pipeline (broker, intake, settlement, a fleet of replicas) be
// measured on a machine without one, with the CPU left to the pipeline.
type Latency struct {
	Base   time.Duration
	PerRow time.Duration
}

// ParseLatency reads "BASE,PER_ROW" in Go durations, e.g. "40ms,400us".
func ParseLatency(s string) (Latency, error) {
	base, perRow, ok := strings.Cut(s, ",")
	if !ok {
		return Latency{}, fmt.Errorf("batch: simulated latency %q: want BASE,PER_ROW (e.g. 40ms,400us)", s)
	}
	var l Latency
	var err error
	if l.Base, err = time.ParseDuration(strings.TrimSpace(base)); err != nil {
		return Latency{}, fmt.Errorf("batch: simulated latency %q: BASE: %w", s, err)
	}
	if l.PerRow, err = time.ParseDuration(strings.TrimSpace(perRow)); err != nil {
		return Latency{}, fmt.Errorf("batch: simulated latency %q: PER_ROW: %w", s, err)
	}
	if l.Base < 0 || l.PerRow < 0 {
		return Latency{}, fmt.Errorf("batch: simulated latency %q: BASE and PER_ROW must not be negative", s)
	}
	if l.Base > time.Minute || l.PerRow > time.Second {
		return Latency{}, fmt.Errorf("batch: simulated latency %q: at most 1m per run and 1s per row", s)
	}
	return l, nil
}

// IsZero reports whether l simulates nothing.
func (l Latency) IsZero() bool { return l.Base == 0 && l.PerRow == 0 }

// For is the simulated time of one run of rows rows.
func (l Latency) For(rows int) time.Duration { return l.Base + time.Duration(rows)*l.PerRow }

// String is l as ParseLatency reads it.
func (l Latency) String() string { return l.Base.String() + "," + l.PerRow.String() }

// Simulate returns a Runner that is r on a simulated accelerator of
// latency l: one run at a time (one CUDA stream), each taking at least
// l.For(rows). r still runs every batch (its results are the results), and
// the rest of the time is slept, so the CPU stays free for the rest of the
// pipeline. Each call makes one instance: wrap each device's runner once.
// Safe for concurrent use; concurrent runs wait their turn.
func Simulate(r Runner, l Latency) Runner {
	if l.IsZero() {
		return r
	}
	return &simRunner{r: r, lat: l}
}

type simRunner struct {
	r   Runner
	lat Latency
	mu  sync.Mutex // one run at a time, as on one stream
}

func (s *simRunner) RunBatch(ctx context.Context, items []Item) []ItemResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := time.Now()
	res := s.r.RunBatch(ctx, items)
	rows := 0
	for i := range items {
		rows += itemRows(&items[i])
	}
	if rest := s.lat.For(rows) - time.Since(start); rest > 0 {
		t := time.NewTimer(rest)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	return res
}
