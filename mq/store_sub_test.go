package mq

import (
	"context"
	"testing"
	"time"
)

// Two events store subscriptions of one Conn, with a client id that real
// KubeMQ's store refuses as it is (':' and ','), both get every event sent
// after they subscribed from sequence 1, even to a channel that did not
// exist when they subscribed.
func TestStoreSubscriptionsGetTheirOwnClientIDs(t *testing.T) {
	for _, tg := range targets(t, fastBroker()) {
		t.Run(tg.name, func(t *testing.T) {
			c, err := Dial(context.Background(), Config{Address: tg.addr, ClientID: "odd:client,id"})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ch := chanName(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			a, err := c.SubscribeEventsStore(ctx, ch, "", 1)
			if err != nil {
				t.Fatal(err)
			}
			b, err := c.SubscribeEventsStore(ctx, ch, "", 1)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond) // both subscribed before the channel exists
			if err := c.SendEventStore(ctx, ch, []byte("x"), nil); err != nil {
				t.Fatal(err)
			}
			for name, sub := range map[string]<-chan Event{"first": a, "second": b} {
				select {
				case e := <-sub:
					if e.Sequence != 1 || string(e.Body) != "x" {
						t.Errorf("%s subscription got %+v", name, e)
					}
				case <-time.After(5 * time.Second):
					t.Errorf("%s subscription got nothing", name)
				}
			}
		})
	}
}
