package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/broker/brokertest"
	"github.com/inferq/inferq/client"
	"github.com/inferq/inferq/mq"
)

// A broker that refuses the client's token refuses it for good: Ready
// (and so Enqueue) fails at once with mq.ErrUnauthorized, instead of
// retrying the refusal as a broker away until the caller's ctx ends.
func TestWrongTokenFailsAtOnce(t *testing.T) {
	srv := brokertest.NewServer(t, broker.Options{AuthToken: "s3cret", PollWaitFloor: 20 * time.Millisecond})
	c := newClient(t, srv.Addr, "intruder", func(cfg *client.Config) { cfg.Broker.AuthToken = "wrong" })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	err := c.Ready(ctx)
	if !errors.Is(err, mq.ErrUnauthorized) || !errors.Is(err, client.ErrNotReady) {
		t.Fatalf("Ready with a wrong token: %v; want ErrNotReady wrapping mq.ErrUnauthorized", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Ready took %v to report the refusal: it waited for its ctx", took)
	}
}
