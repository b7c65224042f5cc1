package mq

import (
	"testing"
	"time"
)

// TestBackoffBounds: every wait lies in the upper half of its doubling step
// and never above RetryMax; Reset starts again from RetryMin.
func TestBackoffBounds(t *testing.T) {
	c := &Conn{cfg: Config{RetryMin: 100 * time.Millisecond, RetryMax: 3 * time.Second}}
	b := c.newBackoff()
	for round := range 2 {
		step := c.cfg.RetryMin
		for i := range 12 {
			d := b.NextBackOff()
			if d < step/2 || d > step {
				t.Errorf("round %d wait %d = %v, want within [%v, %v]", round, i, d, step/2, step)
			}
			step = min(2*step, c.cfg.RetryMax)
		}
		b.Reset()
	}
}
