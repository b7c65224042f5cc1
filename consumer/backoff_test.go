package consumer

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	tests := []struct {
		initial, max time.Duration
		attempt      int
		lo, hi       time.Duration
	}{
		{time.Second, 30 * time.Second, 1, 500 * time.Millisecond, time.Second},
		{time.Second, 30 * time.Second, 2, time.Second, 2 * time.Second},
		{time.Second, 30 * time.Second, 3, 2 * time.Second, 4 * time.Second},
		{time.Second, 5 * time.Second, 10, 2500 * time.Millisecond, 5 * time.Second},
		{time.Second, 5 * time.Second, 1000, 2500 * time.Millisecond, 5 * time.Second},
		{0, 0, 3, 0, 0},
	}
	for _, tt := range tests {
		seen := map[time.Duration]bool{}
		for range 200 {
			d := backoff(tt.initial, tt.max, tt.attempt)
			if d < tt.lo || d > tt.hi {
				t.Fatalf("backoff(%v, %v, %d) = %v, want within [%v, %v]", tt.initial, tt.max, tt.attempt, d, tt.lo, tt.hi)
			}
			seen[d] = true
		}
		if tt.hi > 0 && len(seen) < 2 {
			t.Errorf("backoff(%v, %v, %d) has no jitter", tt.initial, tt.max, tt.attempt)
		}
	}
}
