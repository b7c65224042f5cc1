package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/broker/brokertest"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/worker"
)

// A channel name the broker refuses is a permanent failure for the results
// store (never retried, never kept for a replay that cannot succeed), on
// every call of the results broker.
func TestResultsBrokerRefusalsArePermanent(t *testing.T) {
	srv := brokertest.NewServer(t, broker.Options{SecondLength: 50 * time.Millisecond, PollWaitFloor: 50 * time.Millisecond})
	conn, err := mq.Dial(context.Background(), mq.Config{Address: srv.Addr, ClientID: "results-refusals"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	rb := worker.ResultsBroker(conn)
	ctx := context.Background()
	for _, ch := range []string{"rayserve-result-a b", "reply.*", "reply.>", "reply.", "rayserve-result-a\nb"} {
		for op, call := range map[string]func() error{
			"events store": func() error { return rb.SendEventStore(ctx, ch, []byte(`{}`), nil) },
			"queue":        func() error { return rb.SendQueue(ctx, ch, []byte(`{}`), time.Hour, "w") },
			"remove old":   func() error { _, _, err := rb.RemoveOld(ctx, ch, time.Second, "w", 8); return err },
		} {
			err := call()
			var perm *backoff.PermanentError
			if !errors.As(err, &perm) || !errors.Is(err, mq.ErrRefused) {
				t.Errorf("%s on %q: %v, want a permanent mq.ErrRefused", op, ch, err)
			}
		}
	}
	if err := rb.SendEventStore(ctx, "reply.ok", []byte(`{}`), nil); err != nil {
		t.Errorf("a valid channel: %v", err)
	}
}
