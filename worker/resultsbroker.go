package worker

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/results"
)

// ResultsBroker adapts an mq connection to results.Broker: events store
// sends for reply_to, queue sends with expiration for the compat channel,
// and the one-message auto-ack receive that removes an old record.
func ResultsBroker(c *mq.Conn) results.Broker { return resultsBroker{c} }

type resultsBroker struct{ c *mq.Conn }

func (b resultsBroker) SendEventStore(ctx context.Context, channel string, body []byte, tags map[string]string) error {
	return classify(b.c.SendEventStore(ctx, channel, body, tags))
}

func (b resultsBroker) SendQueue(ctx context.Context, channel string, body []byte, expiry time.Duration) error {
	err := b.c.Sender().Send(ctx, mq.OutMessage{Channel: channel, Body: body, ExpirationSeconds: int((expiry + time.Second - 1) / time.Second)})
	return classify(err)
}

func (b resultsBroker) ReceiveOne(ctx context.Context, channel string, wait time.Duration) (bool, error) {
	found, err := b.c.ReceiveOne(ctx, channel, wait)
	return found, classify(err)
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
