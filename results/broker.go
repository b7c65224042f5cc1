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
	// confirmed it. The message is marked as this writer's, and as the
	// write named write, so that RemoveOld knows it: a record of another
	// write of this writer is one the next supersedes; this write's is not.
	SendQueue(ctx context.Context, channel string, body []byte, expiry time.Duration, write string) error

	// RemoveOld removes, oldest first, the messages of the compat queue
	// channel that the record of write (sent before with SendQueue)
	// supersedes: records this writer wrote in another write (an earlier
	// delivery's, or a try of this one that failed late) and non-terminal
	// ones (the producer's PENDING), at most max of them. It returns what
	// then stands at the head (OldOwn when it is write's own record;
	// OldRemoved when it stopped after max removals) and how many it
	// removed.
	//
	// It must never remove any other message, not even one that arrives
	// while it works (the Python adapter's soft cancel purges the channel
	// and writes CANCELLED at any moment, KUBEMQ.md trap 24): the check
	// must be on the message removed, not on one seen before (one removed
	// by mistake is written back at once). It must stop only at the true
	// head: a peek can show a later message while a reader's closing peek
	// holds an older one (KUBEMQ.md fact 48). It waits up to wait (at
	// least the broker's 1 s floor) only when the channel is empty, which
	// it is not after write's send unless a purge took that record. It
	// must never purge the channel (AckAll blocks its whole wait and drops
	// records written meanwhile), and must not wait in a queues_stream
	// poll (KUBEMQ.md trap 11). mq.Conn.TakeWhile fits.
	RemoveOld(ctx context.Context, channel string, wait time.Duration, write string, max int) (Old, int, error)
}

// Old is what Broker.RemoveOld found at the head of a compat channel.
type Old int

const (
	// OldNone: the channel held no message.
	OldNone Old = iota
	// OldRemoved: the removal stopped after as many removals as it may
	// make, and older records may still stand ahead.
	OldRemoved
	// OldFinal: the oldest message is a terminal record another writer
	// put there, such as the producer's CANCELLED. It stands, and the
	// Store's record behind it is never read: the channel's readers see
	// the oldest record only.
	OldFinal
	// OldKept: the oldest message is no record. It stays, and the
	// Store's record stays behind it.
	OldKept
	// OldOwn: the oldest message is the record of the write asked about:
	// nothing older is left.
	OldOwn
)

// String names o for logs.
func (o Old) String() string {
	switch o {
	case OldNone:
		return "none"
	case OldRemoved:
		return "removed"
	case OldFinal:
		return "final"
	case OldKept:
		return "kept"
	case OldOwn:
		return "own"
	}
	return "unknown"
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
