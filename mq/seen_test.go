package mq

import (
	"math/bits"
	"testing"
)

func (s *seen) popcount() int {
	n := 0
	for _, w := range s.bits {
		n += bits.OnesCount64(w)
	}
	return n
}

// seen counts the sequences stored and never received: the gaps below the
// highest received, and what was stored after it; what is older than its
// window, or forgotten, counts as received.
func TestSeenCountsWhatWasNeverReceived(t *testing.T) {
	cases := []struct {
		name     string
		recv     []uint64
		forget   bool
		last     uint64
		gaps     int64
		missing  int64
		wantBase uint64
	}{
		{name: "nothing received", last: 10, gaps: 0, missing: 0},
		{name: "in order", recv: []uint64{5, 6, 7}, last: 7, gaps: 0, missing: 0, wantBase: 8},
		{name: "stored after", recv: []uint64{5, 6, 7}, last: 10, gaps: 0, missing: 3, wantBase: 8},
		{name: "strays below the highest", recv: []uint64{1, 2, 6, 7}, last: 9, gaps: 3, missing: 5, wantBase: 3},
		{name: "strays come back", recv: []uint64{1, 2, 6, 7, 4, 3, 5}, last: 9, gaps: 0, missing: 2, wantBase: 8},
		{name: "duplicates", recv: []uint64{1, 3, 3, 3}, last: 3, gaps: 1, missing: 1, wantBase: 2},
		{name: "forgotten", recv: []uint64{1, 2, 6, 7}, forget: true, last: 9, gaps: 0, missing: 2, wantBase: 8},
		{name: "before the first is unknown", recv: []uint64{10, 12}, last: 12, gaps: 1, missing: 1, wantBase: 11},
		{name: "older than the window", recv: []uint64{1, 3, 3 + seenWindow}, last: 3 + seenWindow, gaps: seenWindow - 1, missing: seenWindow - 1, wantBase: 4},
		{name: "far jump", recv: []uint64{1, 5, 10 * seenWindow}, last: 10*seenWindow + 2, gaps: seenWindow - 1, missing: seenWindow + 1, wantBase: 9*seenWindow + 1},
		{name: "last below base", recv: []uint64{5, 6}, last: 3, gaps: 0, missing: 0, wantBase: 7},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var s seen
			for _, q := range c.recv {
				s.add(q)
			}
			if c.forget {
				s.forget()
			}
			if g := s.gaps(); g != c.gaps {
				t.Errorf("gaps %d, want %d", g, c.gaps)
			}
			if m := s.missing(c.last); m != c.missing {
				t.Errorf("missing(%d) %d, want %d", c.last, m, c.missing)
			}
			if c.wantBase != 0 && s.base != c.wantBase {
				t.Errorf("base %d, want %d", s.base, c.wantBase)
			}
			if n := s.popcount(); n != s.set {
				t.Errorf("%d bits set, counted %d", n, s.set)
			}
		})
	}
}

// A long run in order keeps nothing: the window's base follows.
func TestSeenFollowsALongRun(t *testing.T) {
	var s seen
	for q := uint64(1); q <= 5*seenWindow; q++ {
		s.add(q)
	}
	if s.set != 0 || s.base != 5*seenWindow+1 || s.gaps() != 0 {
		t.Fatalf("base %d set %d gaps %d", s.base, s.set, s.gaps())
	}
}
