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

// A message whose sequence is below one already received came back from
// another consumer; batches in order are never taken for that, nor is a
// NAcked retry.
func TestChannelReturnedTo(t *testing.T) {
	q := &channel{name: "q"}
	if got := q.returnedTo(msgs(5, 6, 7)); strings.Contains(fmtBools(got), "1") {
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
	if q.seen.Load() != 10 {
		t.Errorf("seen %d, want 10", q.seen.Load())
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
