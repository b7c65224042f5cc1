package mq

import (
	"context"
	"fmt"
	"time"
)

// TakeWhile removes the oldest messages of channel, one at a time, while
// take accepts them, at most max, and returns the oldest message left (nil
// when the channel held none within wait, or max were taken) and how many
// it removed. Safe for concurrent use; ctx bounds the call.
//
// A step peeks the head (waiting up to wait only on an empty channel),
// receives it when take accepts it, and asks take again about the message
// received: a purge and a new write can slip in between (KUBEMQ.md trap
// 24), and a refused message is written back at once. Both are legacy
// calls: outside the stream poll pool (trap 11), served one at a time with
// readers' peeks (fact 28).
//
// A refused head is the oldest only when every smaller sequence is
// accounted for, received by this call or gone by a count: a peek can skip
// a message a reader's closing peek still holds (fact 48). Until then it
// peeks again, with pauses adding up to about a second.
func (c *Conn) TakeWhile(ctx context.Context, channel string, wait time.Duration, max int, take func(*Message) bool) (*Message, int, error) {
	var (
		taken, detours int
		received       []uint64 // the sequences this call received
		pause          = firstConfirmPause
	)
	for taken < max {
		raw, err := c.peek(ctx, channel, 1, wait)
		if err != nil || len(raw) == 0 {
			return nil, taken, err
		}
		head := fromPB(raw[0])
		if !take(head) {
			ok, err := c.isOldest(ctx, channel, head, received)
			if err != nil || ok || pause > lastConfirmPause {
				return head, taken, err
			}
			if err := sleepCtx(ctx, pause); err != nil {
				return head, taken, err
			}
			pause *= 2
			continue
		}
		got, err := c.receive(ctx, "take head of", channel, 1, wait, false)
		if err != nil {
			return nil, taken, err
		}
		var m *Message
		if len(got) > 0 {
			m = fromPB(got[0])
			received = append(received, m.Sequence)
			if take(m) {
				taken++
				continue
			}
			if err := c.putBack(ctx, channel, m); err != nil {
				return nil, taken, err
			}
		}
		// The head went between the peek and the receive (a purge, trap
		// 24; a peek waits for a running purge), or another message came
		// instead: look again, a bounded number of times.
		if detours++; detours >= max {
			return m, taken, nil
		}
	}
	return nil, taken, nil
}

// The pauses of TakeWhile while a refused head may not be the oldest: a
// closing peek hands its message back at once when no other member of the
// channel's group is open, else after a 100 ms timer (fact 26).
const (
	firstConfirmPause = 10 * time.Millisecond
	lastConfirmPause  = 640 * time.Millisecond
)

// isOldest reports whether head is the oldest message of channel: every
// smaller sequence was received by this call, or a count finds no more
// messages waiting than sequences from head's on (an older one still
// waiting is held elsewhere, such as by a closing peek).
func (c *Conn) isOldest(ctx context.Context, channel string, head *Message, received []uint64) (bool, error) {
	below := 0
	for _, seq := range received {
		if seq < head.Sequence {
			below++
		}
	}
	if uint64(below)+1 >= head.Sequence {
		return true, nil
	}
	q, ok, err := c.queueInfo(ctx, channel)
	if err != nil || !ok {
		return true, err
	}
	return q.Waiting <= q.LastSequence-int64(head.Sequence)+1, nil
}

// sleepCtx waits d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// putBack writes m back to channel as a new message, with its body,
// metadata, tags, policy and the expiry it had left.
func (c *Conn) putBack(ctx context.Context, channel string, m *Message) error {
	out := OutMessage{Channel: channel, Body: m.Body, Metadata: m.Metadata, Tags: m.Tags,
		MaxReceiveCount: m.MaxReceiveCount, MaxReceiveQueue: m.MaxReceiveQueue}
	if !m.ExpirationAt.IsZero() {
		left := time.Until(m.ExpirationAt)
		out.ExpirationSeconds = max(1, int((left+time.Second-1)/time.Second))
	}
	if err := c.Sender().Send(ctx, out); err != nil {
		return fmt.Errorf("put back the message taken from %s: %w", channel, err)
	}
	return nil
}
