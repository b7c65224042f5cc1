package mq

import (
	"context"
	"fmt"
	"time"
)

// TakeHead removes the oldest message of channel when take accepts that
// very message, and returns the oldest message it saw (nil when the
// channel held none within wait) and whether it removed it.
//
// It peeks first (the legacy peek, waiting up to wait, whole seconds, at
// least 1, when the channel is empty); a head that take refuses is left
// untouched. A head take accepts is then received (the legacy one-message
// receive, acked on receipt) and take is asked again about the message
// received: the head can change between the two calls, when another client
// purged the channel and wrote a new message (the Python adapter's soft
// cancel, KUBEMQ.md trap 24). A received message take refuses is written
// back at once, body, metadata, tags, policy and the expiry it had left,
// as a new message: it is gone for that moment only, and it is never
// consumed. The peek, the receive and a purge of the channel are served
// one at a time by the broker (fact 28), so this happens only when a purge
// slips in between them; a peek sent during a purge waits for it.
//
// Both calls go around the broker's shared stream poll pool (trap 11) and
// are serialised with every other legacy peek of the channel, so readers
// polling it do not move the message about (facts 22, 26), as they do
// around a legacy stream receive (fact 44). When the head is gone by the
// time of the receive, TakeHead peeks once more. Safe for concurrent use;
// ctx bounds the call.
func (c *Conn) TakeHead(ctx context.Context, channel string, wait time.Duration, take func(*Message) bool) (*Message, bool, error) {
	for round := 0; ; round++ {
		raw, err := c.peek(ctx, channel, 1, wait)
		if err != nil || len(raw) == 0 {
			return nil, false, err
		}
		head := fromPB(raw[0])
		if !take(head) {
			return head, false, nil
		}
		got, err := c.receive(ctx, "take head of", channel, 1, wait, false)
		if err != nil {
			return nil, false, err
		}
		if len(got) > 0 {
			m := fromPB(got[0])
			if take(m) {
				return m, true, nil
			}
			if err := c.putBack(ctx, channel, m); err != nil {
				return m, false, err
			}
			return m, false, nil
		}
		if round > 0 {
			return nil, false, nil
		}
		// The head went between the peek and the receive: another
		// client took it, such as a purge (trap 24). Look once more: a
		// peek waits for a running purge to end (fact 28), then sees
		// what its client writes next.
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
