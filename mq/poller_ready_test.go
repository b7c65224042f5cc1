package mq

import (
	"context"
	"testing"
	"time"
)

// Up follows a broker that stops answering without closing anything (a
// SIGSTOP): false within AnswerWithin while the Poller waits, its
// MaxInFlight messages out, and makes no call of its own; true again once
// the broker answers. Before, Up said true for as long as the freeze
// lasted. A Poller that waits with a broker that answers stays Up past
// AnswerWithin: its probe pings.
func TestPollerUpFollowsAFrozenBroker(t *testing.T) {
	proxy, c, b := proxiedBroker(t, fastBroker(), Config{CallTimeout: 500 * time.Millisecond})
	ch := chanName(t)
	held := make(chan *Message, 2)
	p := runPoller(t, c, PollerConfig{Channel: ch, MaxItems: 2, MaxInFlight: 2, PollWait: 100 * time.Millisecond,
		Deliver: func(_ context.Context, batch []*Message) error {
			for _, m := range batch {
				held <- m
			}
			return nil
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

// Up follows a broker that freezes while the loop waits for a stream
// client: a peek saw a message, and no client can connect (the proxy
// refuses new connections), so the loop can do nothing but wait. It makes
// no call then, so it counts as parked and the probe pings. Before, it did
// not: Up stayed true for the whole AnswerWithin (set long here). The
// consumer's TestBrokerLossMidLoad met it now and then in the first second
// of a poller, while its first client warmed up (trap 3).
func TestPollerUpFollowsABrokerLostWhileNoClientIsReady(t *testing.T) {
	proxy, c, _ := proxiedBroker(t, fastBroker(), Config{CallTimeout: 500 * time.Millisecond})
	ch := chanName(t)
	if err := c.Sender().Send(context.Background(), OutMessage{Channel: ch, Body: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Peek(context.Background(), ch, 1, time.Second); err != nil {
		t.Fatal(err)
	}
	proxy.refuseNew()
	const answerWithin = 30 * time.Second
	p := runPoller(t, c, PollerConfig{Channel: ch, PollWait: 100 * time.Millisecond, AnswerWithin: answerWithin,
		Deliver: func(_ context.Context, batch []*Message) error {
			t.Errorf("delivered %d with no stream client able to connect", len(batch))
			return nil
		}})
	waitFor(t, 5*time.Second, "the peek to see the message", func() bool { return p.Up() && p.Stats().Peeks > 0 })
	time.Sleep(100 * time.Millisecond) // the loop waits for a client
	proxy.freeze()
	frozen := time.Now()
	waitFor(t, answerWithin/3, "Up to turn false with the broker frozen", func() bool { return !p.Up() })
	t.Logf("Up false %v after the freeze; %+v", time.Since(frozen).Round(time.Millisecond), p.Stats())
	if s := p.Stats(); s.Polls > 0 || s.Peeks > 1 {
		t.Errorf("the loop did not wait for a client: %+v", s)
	}
	proxy.thaw()
}
