package consumer

import (
	"strings"
	"testing"

	"github.com/inferq/inferq/mq"
)

func msgs(seqs ...uint64) []*mq.Message {
	out := make([]*mq.Message, len(seqs))
	for i, s := range seqs {
		out[i] = &mq.Message{Sequence: s, ReceiveCount: 1}
	}
	return out
}

// A message whose sequence is below the first this stint received came back
// from another consumer; batches in order are never taken for that, nor is
// a NAcked retry, nor a stray of this consumer's own polls (above the
// stint's start, below the highest received: KUBEMQ.md fact 43). A new
// stint starts over.
func TestChannelReturnedTo(t *testing.T) {
	q := &channel{name: "q"}
	if got := q.returnedTo(msgs(6, 5, 7)); strings.Contains(fmtBools(got), "1") {
		t.Errorf("first batch: %s", fmtBools(got))
	}
	if got := q.returnedTo(msgs(8, 9)); fmtBools(got) != "00" {
		t.Errorf("next batch in order: %s", fmtBools(got))
	}
	b := msgs(3, 10, 4)
	nacked := &mq.Message{Sequence: 2, ReceiveCount: 2}
	if got := q.returnedTo(append(b, nacked)); fmtBools(got) != "1010" {
		t.Errorf("returned 3 and 4 among new 10, a NAcked 2: %s, want 1010", fmtBools(got))
	}
	if got := q.returnedTo(msgs(11, 12, 14)); fmtBools(got) != "000" {
		t.Errorf("in order past a gap: %s", fmtBools(got))
	}
	if got := q.returnedTo(msgs(13)); fmtBools(got) != "0" {
		t.Errorf("a stray of this consumer's polls, 13 after 14: %s, want 0", fmtBools(got))
	}
	if q.start.Load() != 5 {
		t.Errorf("start %d, want 5", q.start.Load())
	}
	// A new stint (the shard owned again): what another owner took
	// meanwhile and gave back is below its start.
	q.start.Store(0)
	if got := q.returnedTo(msgs(40, 41)); fmtBools(got) != "00" {
		t.Errorf("a new stint's first batch: %s", fmtBools(got))
	}
	if got := q.returnedTo(msgs(20, 42, 13)); fmtBools(got) != "101" {
		t.Errorf("20 and 13, taken before the new stint, among a new 42: %s, want 101", fmtBools(got))
	}
}

func fmtBools(bs []bool) string {
	var b strings.Builder
	for _, v := range bs {
		if v {
			b.WriteByte('1')
		} else {
			b.WriteByte('0')
		}
	}
	return b.String()
}
