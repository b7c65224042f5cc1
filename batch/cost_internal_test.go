package batch

import (
	"testing"
	"time"
)

// The fixed cost of a run is the intercept of run time over rows, within
// [0, the shortest run]; with one row count it is the shortest run; before
// costMinRuns runs it is 0.
func TestRunCostEstimate(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	type run struct {
		rows int
		took time.Duration
	}
	sim := func(base, perRow time.Duration, rows ...int) []run {
		var rs []run
		for _, r := range rows {
			rs = append(rs, run{r, base + time.Duration(r)*perRow})
		}
		return rs
	}
	for _, tc := range []struct {
		name string
		runs []run
		want time.Duration
	}{
		{"too few runs", sim(40*time.Millisecond, 0, 64, 1, 64, 1, 64, 1, 64), 0},
		{"an accelerator's runs", sim(40*time.Millisecond, 400*time.Microsecond, 64, 1, 63, 18, 64, 64, 3, 57, 64, 1), 40 * time.Millisecond},
		{"one row count: the shortest run", []run{{1, ms(41)}, {1, ms(40.4)}, {1, ms(40.9)}, {1, ms(42)}, {1, ms(40.5)}, {1, ms(40.6)}, {1, ms(44)}, {1, ms(40.7)}}, ms(40.4)},
		{"a cost per row only", sim(0, 20*time.Millisecond, 1, 2, 5, 8, 3, 1, 7, 8), 0},
		{"a negative intercept is 0", []run{{1, ms(0.01)}, {2, ms(0.01)}, {60, ms(3)}, {64, ms(3.3)}, {30, ms(1.2)}, {1, ms(0.01)}, {64, ms(3.2)}, {32, ms(1.3)}}, 0},
		{"at most the shortest run", []run{{1, ms(5)}, {64, ms(4)}, {1, ms(5)}, {64, ms(4)}, {1, ms(5)}, {64, ms(4)}, {1, ms(5)}, {64, ms(4)}}, ms(4)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c runCost
			for _, r := range tc.runs {
				c.observe(r.rows, r.took)
			}
			if d := c.fixed - tc.want; d < -time.Microsecond || d > time.Microsecond {
				t.Errorf("fixed cost %v, want %v", c.fixed, tc.want)
			}
		})
	}

	// A fragment: fewer than half the mean rows of the runs, on a device
	// whose fixed cost is above the delay.
	var acc runCost
	for _, r := range sim(40*time.Millisecond, 400*time.Microsecond, 64, 64, 63, 64, 57, 64, 64, 64) {
		acc.observe(r.rows, r.took)
	}
	for _, tc := range []struct {
		rows  int
		delay time.Duration
		want  bool
	}{
		{1, time.Millisecond, true},
		{30, time.Millisecond, true},
		{32, time.Millisecond, false},
		{1, 50 * time.Millisecond, false},
	} {
		if got := acc.fragment(tc.rows, tc.delay); got != tc.want {
			t.Errorf("fragment(%d, %v) with runs of %.1f rows and a fixed cost of %v = %v, want %v", tc.rows, tc.delay, acc.mean, acc.fixed, got, tc.want)
		}
	}
	// The window slides: after costRuns runs of a cheap device, an
	// accelerator's runs are what counts.
	var c runCost
	for range costRuns {
		c.observe(8, 10*time.Microsecond)
	}
	for _, r := range sim(30*time.Millisecond, time.Millisecond, 1, 4, 16, 64, 2, 8, 32, 64, 1, 4, 16, 64, 2, 8, 32, 64, 1, 4, 16, 64, 2, 8, 32, 64, 1, 4, 16, 64, 2, 8, 32, 64) {
		c.observe(r.rows, r.took)
	}
	if d := c.fixed - 30*time.Millisecond; d < -time.Microsecond || d > time.Microsecond {
		t.Errorf("after the window slid: fixed cost %v, want 30ms", c.fixed)
	}
}
