package mq

import (
	"context"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
)

// Up follows a broker that stops answering without closing anything (a
// SIGSTOP): false within AnswerWithin while the Poller waits, its
// MaxInFlight messages out, and makes no call of its own; true again once
// the broker answers. Before, Up said true for as long as the freeze
// lasted. A Poller that waits with a broker that answers stays Up past
// AnswerWithin: its probe pings.
func TestPollerUpFollowsAFrozenBroker(t *testing.T) {
	t.Cleanup(func() { checkNoLeaks(t) })
	b := broker.New(fastBroker())
	t.Cleanup(func() { _ = b.Close() })
	proxy := newFreezableProxy(t, serveKubemq(t, b))
	c := dialCfg(t, Config{Address: proxy.lis.Addr().String(), CallTimeout: 500 * time.Millisecond})
	ch := chanName(t)
	held := make(chan *Message, 2)
	p := runPoller(t, c, PollerConfig{Channel: ch, MaxItems: 2, MaxInFlight: 2, PollWait: 100 * time.Millisecond,
		Deliver: func(_ context.Context, batch []*Message) (int, error) {
			for _, m := range batch {
				held <- m
			}
			return len(batch), nil
		}})
	if err := c.Sender().Send(context.Background(), OutMessage{Channel: ch, Body: []byte("a")}, OutMessage{Channel: ch, Body: []byte("b")}); err != nil {
		t.Fatal(err)
	}
	var msgs []*Message
	for range 2 {
		select {
		case m := <-held:
			msgs = append(msgs, m)
		case <-time.After(10 * time.Second):
			t.Fatal("messages not delivered")
		}
	}
	bound := p.cfg.AnswerWithin
	t.Logf("AnswerWithin %v", bound)

	// MaxInFlight is out: the Poller waits for room and calls nothing.
	for end := time.Now().Add(bound + time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if !p.Up() {
			t.Fatal("Up false while the Poller waits for room and the broker answers")
		}
	}

	proxy.freeze()
	frozen := time.Now()
	waitFor(t, 10*bound, "Up to turn false with the broker frozen", func() bool { return !p.Up() })
	t.Logf("Up false %v after the freeze", time.Since(frozen).Round(time.Millisecond))
	proxy.thaw()
	thawed := time.Now()
	waitFor(t, 10*bound, "Up again after the thaw", p.Up)
	t.Logf("Up again %v after the thaw", time.Since(thawed).Round(time.Millisecond))

	// The stream lived through the freeze: the messages settle.
	for _, m := range msgs {
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "the acks to reach the broker", func() bool {
		st := b.QueueSnapshot(ch)
		return st.InFlight == 0 && len(st.Waiting) == 0
	})
}
