package worker

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/results"
	"github.com/inferq/inferq/task"
)

// ResultsBroker adapts an mq connection to results.Broker: events store
// sends for reply_to, queue sends with expiration for the compat channel
// (tagged as inferq's records, task.TagWriter, and with the write's name,
// task.TagWrite), and the removal of old records there, which takes the
// channel's oldest messages while they are records the write's supersedes
// (task.Stand, and not the write's own) and never a producer's CANCELLED.
func ResultsBroker(c *mq.Conn) results.Broker { return resultsBroker{c} }

type resultsBroker struct{ c *mq.Conn }

func (b resultsBroker) SendEventStore(ctx context.Context, channel string, body []byte, tags map[string]string) error {
	return classify(b.c.SendEventStore(ctx, channel, body, tags))
}

func (b resultsBroker) SendQueue(ctx context.Context, channel string, body []byte, expiry time.Duration, write string) error {
	err := b.c.Sender().Send(ctx, mq.OutMessage{Channel: channel, Body: body,
		Tags:              map[string]string{task.TagWriter: task.WriterInferq, task.TagWrite: write},
		ExpirationSeconds: int((expiry + time.Second - 1) / time.Second)})
	return classify(err)
}

func (b resultsBroker) RemoveOld(ctx context.Context, channel string, wait time.Duration, write string, max int) (results.Old, int, error) {
	own := func(m *mq.Message) bool { return m.Tags[task.TagWrite] == write }
	head, taken, err := b.c.TakeWhile(ctx, channel, wait, max, func(m *mq.Message) bool {
		return !own(m) && task.Stand(m.Tags, m.Body) == task.Superseded
	})
	switch {
	case err != nil:
		return results.OldNone, taken, classify(err)
	case head == nil && taken == max:
		return results.OldRemoved, taken, nil
	case head == nil:
		return results.OldNone, taken, nil
	case own(head):
		return results.OldOwn, taken, nil
	case task.Stand(head.Tags, head.Body) == task.Final:
		return results.OldFinal, taken, nil
	}
	return results.OldKept, taken, nil
}

// classify marks an error that retrying cannot fix with backoff.Permanent,
// the results.Broker contract: a message over the size limit, or a channel
// name the broker does not take (KUBEMQ.md trap 19), is refused for good.
func classify(err error) error {
	if err != nil && (errors.Is(err, mq.ErrTooLarge) || errors.Is(err, mq.ErrRefused)) {
		return backoff.Permanent(err)
	}
	return err
}
