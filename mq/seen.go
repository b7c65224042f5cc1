package mq

// seenWindow is the size, in sequences, of what a Poller remembers of the
// sequences it received (2 KiB of bits).
const seenWindow = 1 << 14

// seen tracks which of its channel's sequences a Poller received, so that
// it can count the ones stored before its highest and never delivered to
// it: on KubeMQ, the strays that a batch's settlement left in its closing
// subscription (KUBEMQ.md fact 45), which come back to the next poll only
// if that poll asks for them. Every sequence below base counts as
// received; bits holds the window [base, base+seenWindow) as a ring. A
// sequence more than seenWindow below the highest one received is
// forgotten (counts as received): what is that old is no stray of the
// last batches. Not safe for concurrent use (the Poller's Run goroutine).
type seen struct {
	base uint64 // 0: nothing received yet
	max  uint64 // highest sequence received
	set  int    // bits set in the window
	bits [seenWindow / 64]uint64
}

func (s *seen) bit(seq uint64) (word int, mask uint64) {
	i := seq % seenWindow
	return int(i / 64), 1 << (i % 64)
}

// add notes seq as received.
func (s *seen) add(seq uint64) {
	if seq == 0 {
		return
	}
	if s.base == 0 {
		s.base = seq // what came before the first delivery is unknown: not counted
	}
	if seq < s.base {
		return
	}
	if seq >= s.base+seenWindow {
		s.slide(seq - seenWindow + 1)
	}
	w, m := s.bit(seq)
	if s.bits[w]&m == 0 {
		s.bits[w] |= m
		s.set++
	}
	s.max = max(s.max, seq)
	for s.set > 0 {
		w, m := s.bit(s.base)
		if s.bits[w]&m == 0 {
			break
		}
		s.bits[w] &^= m
		s.set--
		s.base++
	}
}

// slide moves base up to to, forgetting the window below it.
func (s *seen) slide(to uint64) {
	if to-s.base >= seenWindow {
		s.bits = [seenWindow / 64]uint64{}
		s.set, s.base = 0, to
		return
	}
	for ; s.base < to; s.base++ {
		if w, m := s.bit(s.base); s.bits[w]&m != 0 {
			s.bits[w] &^= m
			s.set--
		}
	}
}

// missing counts the sequences up to last (the channel's last stored one)
// that were never received: the strays below the highest received, and
// the messages stored after it.
func (s *seen) missing(last uint64) int64 {
	if s.base == 0 || last < s.base {
		return 0
	}
	return int64(last-s.base+1) - int64(s.set)
}

// gaps counts the sequences below the highest received that were never
// received.
func (s *seen) gaps() int64 {
	if s.max == 0 {
		return 0
	}
	return s.missing(s.max)
}

// forget counts every sequence up to the highest received as received:
// the gaps are no strays (another consumer took them, or a count found
// nothing waiting).
func (s *seen) forget() {
	if s.max > 0 && s.base <= s.max {
		s.slide(s.max + 1)
	}
}
