package batch

import (
	"math"
	"time"
)

// What a run costs, and when Flush may cut MaxQueueDelay short.
//
// Flush says nothing more is on its way for the requests a batcher holds,
// and then waiting out MaxQueueDelay only delays them. That holds for a
// cheap run, not for one with a fixed cost under load (an accelerator's
// launch and transfers): a burst reaches the batcher in a few polls a
// millisecond apart, and a flush after the first runs a fragment that holds
// the device for the whole fixed cost while the rest waits behind it.
// Waiting costs a request at most MaxQueueDelay; a fragment costs the device
// the fixed cost. So, while a run's fixed cost is above MaxQueueDelay, a
// flush does not run a group of fewer than half the rows of the recent runs:
// it waits out MaxQueueDelay as Triton's dynamic batcher does. Larger groups,
// cheap devices and light loads keep the flush. (Measured: BENCHMARKS.md.)
//
// The fixed cost is learned from the last costRuns runs: the intercept of
// a least-squares line of run time over rows, within [0, the shortest run];
// while every run had the same rows it is the shortest run (an upper bound).
// Until costMinRuns runs ended it is 0, and a flush works as it always did.
const (
	costRuns    = 32
	costMinRuns = 8
)

// runCost holds the last costRuns runs' rows and times, and the fixed cost
// they show. Owned by the gatherer's goroutine.
type runCost struct {
	rows  [costRuns]float64
	took  [costRuns]float64 // seconds
	n     int               // runs held, up to costRuns
	next  int               // where the next run goes
	fixed time.Duration     // the estimate (see above)
	mean  float64           // rows per run, over the runs held
}

// observe adds a run of rows rows that took took, and updates the estimate.
func (c *runCost) observe(rows int, took time.Duration) {
	c.rows[c.next], c.took[c.next] = float64(rows), took.Seconds()
	c.next = (c.next + 1) % costRuns
	c.n = min(c.n+1, costRuns)
	c.fixed, c.mean = c.estimate()
}

// fragment reports whether a run of rows rows now would be a fragment that
// waiting up to delay may fill (see above).
func (c *runCost) fragment(rows int, delay time.Duration) bool {
	return c.fixed > delay && 2*float64(rows) < c.mean
}

// estimate is the fixed cost of one run the held runs show, and their mean
// rows.
func (c *runCost) estimate() (time.Duration, float64) {
	if c.n < costMinRuns {
		return 0, 0
	}
	var sr, st float64
	shortest := math.Inf(1)
	for i := range c.n {
		sr += c.rows[i]
		st += c.took[i]
		shortest = min(shortest, c.took[i])
	}
	n := float64(c.n)
	mr, mt := sr/n, st/n
	var cov, vr float64
	for i := range c.n {
		dr := c.rows[i] - mr
		cov += dr * (c.took[i] - mt)
		vr += dr * dr
	}
	fixed := shortest
	if vr > 0 {
		fixed = min(max(mt-cov/vr*mr, 0), shortest)
	}
	return time.Duration(fixed * float64(time.Second)), mr
}

// FixedCost returns what one run costs regardless of its rows, as the
// batcher's recent runs show it (see cost.go): 0 until enough runs ended.
// Safe for concurrent use.
func (b *Batcher) FixedCost() time.Duration { return time.Duration(b.fixedCost.Load()) }
