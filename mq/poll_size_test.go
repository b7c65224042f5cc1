package mq

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// A poll's messages come back in one gRPC message: three 40 MiB bodies
// polled together are 120 MiB, over the 100 MiB a call may receive. Each
// must still be delivered, once, and none may cycle back to the queue.
func TestPollerDeliversLargeMessages(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 120 MiB")
	}
	for _, tg := range targets(t, fastBroker()) {
		t.Run(tg.name, func(t *testing.T) {
			c, err := Dial(context.Background(), Config{Address: tg.addr, ClientID: "mqtest-large", MaxMessageBytes: 64 << 20,
				RetryMin: 20 * time.Millisecond, RetryMax: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			ch := chanName(t)
			const n, size = 3, 40 << 20
			for i := range n {
				body := bytes.Repeat([]byte{byte('a' + i)}, size)
				if err := c.Sender().Send(context.Background(), OutMessage{Channel: ch, Body: body}); err != nil {
					t.Fatal(err)
				}
			}
			got := make(chan *Message, 2*n)
			runPoller(t, c, PollerConfig{Channel: ch, MaxItems: 32, Deliver: func(ctx context.Context, batch []*Message) error {
				for _, m := range batch {
					got <- m
					if err := m.Ack(); err != nil {
						t.Errorf("ack: %v", err)
					}
				}
				return nil
			}})
			seen := map[byte]int{}
			deadline := time.After(90 * time.Second) // 120 MiB under -race on a loaded 2-core machine takes ~30 s
			for len(seen) < n {
				select {
				case m := <-got:
					if len(m.Body) != size {
						t.Fatalf("body of %d bytes, want %d", len(m.Body), size)
					}
					seen[m.Body[0]]++
					if m.ReceiveCount > 1 {
						t.Errorf("message %c came back: receive count %d", m.Body[0], m.ReceiveCount)
					}
				case <-deadline:
					t.Fatalf("after 90 s, delivered %v of %d large messages", seen, n)
				}
			}
		})
	}
}
