package results

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Broker is the part of the message broker a Store writes through. Package mq
// implements it over kubemq-go; tests use a fake.
//
// Every method must be safe for concurrent use: a Store calls them from many
// goroutines at once. ctx bounds the call; an implementation whose transport
// must outlive one call (a queues_stream client, KUBEMQ.md trap 4) must not
// tie that transport's lifetime to ctx.
//
// Errors: a Store retries, then spools and later replays, every error except
// one that says retrying can never help. An implementation reports that by
// wrapping it with backoff.Permanent (github.com/cenkalti/backoff/v5): an
// error whose chain holds a *backoff.PermanentError (found with errors.As),
// for example a message over the broker's size limit or an invalid channel
// name. Any other error (broker unreachable, stream lost, timeout) is
// temporary. A permanent failure is not retried: the record is kept in the
// spool for [Store.Get] and logged, never sent again.
type Broker interface {
	// SendEventStore publishes body as one event on the Events Store channel,
	// with the given tags, and returns once the broker confirmed it stored it.
	SendEventStore(ctx context.Context, channel string, body []byte, tags map[string]string) error

	// SendQueue sends body as one message to the queue channel with the given
	// expiration (whole seconds; the broker rounds) and returns once the broker
	// confirmed it.
	SendQueue(ctx context.Context, channel string, body []byte, expiry time.Duration) error

	// ReceiveOne removes at most one message from the queue channel: a
	// receive of one message that acknowledges it at once, waiting up to wait
	// (at least the broker's 1 s floor) when the channel is empty. found
	// reports whether a message was removed. It must never purge the channel
	// (AckAll blocks its whole wait and drops records written meanwhile), and
	// it must not use a queues_stream poll: a stream poll waiting on an empty
	// channel holds one of the broker's shared poll slots and stalls other
	// clients' polls (KUBEMQ.md trap 11). The legacy ReceiveQueueMessages
	// (MaxNumberOfMessages 1, WaitTimeSeconds = wait rounded up) fits.
	ReceiveOne(ctx context.Context, channel string, wait time.Duration) (found bool, err error)
}

// Sentinel errors returned by a Store.
var (
	// ErrClosed is returned by Put after Close has begun.
	ErrClosed = errors.New("results: store closed")
	// ErrInvalidEntry is returned by Put for an entry it cannot store; the
	// wrapping error names the field.
	ErrInvalidEntry = errors.New("results: invalid entry")
	// ErrInvalidConfig is returned by New and Config.Validate; the wrapping
	// error names the field.
	ErrInvalidConfig = errors.New("results: invalid config")
)

// permanent reports whether err says that retrying the same write can never
// succeed. Context errors and unclassified errors are temporary.
func permanent(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var p *backoff.PermanentError
	return errors.As(err, &p)
}
