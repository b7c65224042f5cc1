package mq

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// TestPollerNoPeekBesideAnOpenBatch: while a batch of the Poller's is open
// it does not peek. On KubeMQ (and the embedded broker, which reproduces
// it) a message that a peek saw moves into the open batch when the peek
// closes, where no poll sees it until that batch completes. The Poller
// counts instead and polls what the count finds, so a second task is
// delivered while the first is still running. Before, the idle watch
// peeked beside the open batch: the second task waited for the first to
// be settled.
func TestPollerNoPeekBesideAnOpenBatch(t *testing.T) {
	tg := targets(t, fastBroker())[0]
	c := dial(t, tg)
	ch := chanName(t)
	got := make(chan *Message, 4)
	p := runPoller(t, c, PollerConfig{
		Channel: ch, MaxItems: 1,
		Deliver: deliverInto(got),
	})
	waitFor(t, 5*time.Second, "poller up", p.Up)
	sendN(t, c.Sender(), ch, 1)
	var first *Message
	select {
	case first = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("first message not delivered")
	}
	// The first task runs (unsettled) while the second arrives; let the
	// Poller settle into whatever it does beside an open batch.
	time.Sleep(20 * time.Millisecond)
	peeks := p.Stats().Peeks
	sendN(t, c.Sender(), ch, 1)
	select {
	case second := <-got:
		t.Logf("second delivered beside the open first; peeks during it: %d", p.Stats().Peeks-peeks)
		if err := second.Ack(); err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("second message not delivered while the first is unsettled (peeks since: %d, queue %+v)",
			p.Stats().Peeks-peeks, tg.srv.QueueState(ch))
	}
	if n := p.Stats().Peeks - peeks; n != 0 {
		t.Errorf("%d peeks while a batch was open, want 0", n)
	}
	if err := first.Ack(); err != nil {
		t.Fatal(err)
	}
}

// deliverInto is a Deliver that hands every message to got and takes all.
func deliverInto(got chan<- *Message) func(context.Context, []*Message) error {
	return func(_ context.Context, batch []*Message) error {
		for _, m := range batch {
			got <- m
		}
		return nil
	}
}

// nextMsg receives the next message on got within d; what names the
// message when none comes, which fails the test.
func nextMsg(t testing.TB, got <-chan *Message, d time.Duration, what string) *Message {
	t.Helper()
	select {
	case m := <-got:
		return m
	case <-time.After(d):
		t.Fatalf("%s not delivered in %v", what, d)
		return nil
	}
}

// ackNext receives the next message on got within d and acks it (see
// nextMsg).
func ackNext(t testing.TB, got <-chan *Message, d time.Duration, what string) *Message {
	t.Helper()
	m := nextMsg(t, got, d, what)
	if err := m.Ack(); err != nil {
		t.Fatalf("ack %s: %v", what, err)
	}
	return m
}

// TestPollerLoneTaskNotHeldByACount: after polling what a peek saw, the
// Poller counts what else waits (a burst may be behind it) without waiting
// for the count: a lone task that arrives meanwhile is peeked and
// delivered at once, not after the count. On KubeMQ a count takes ~3 ms,
// and on the light-load path the next task arrived during it four times
// in five (issue 12). A count that answers late, after later peeks and
// polls, is dropped: no poll asks for more than is there.
func TestPollerLoneTaskNotHeldByACount(t *testing.T) {
	const latency = time.Second
	opts := fastBroker()
	opts.InfoLatency = latency
	tg := targets(t, opts)[0]
	c := dial(t, tg)
	ch := chanName(t)
	got := make(chan *Message, 4)
	p := runPoller(t, c, PollerConfig{
		Channel: ch,
		Deliver: deliverInto(got),
	})
	var overAsk atomic.Int64
	p.onPoll = func(asked, got, waiting int) {
		if got < asked {
			overAsk.Add(1)
			t.Logf("poll asked %d, got %d, %d thought waiting", asked, got, waiting)
		}
	}
	waitFor(t, 5*time.Second, "poller up", p.Up)
	receive := func(what string) *Message {
		t.Helper()
		return nextMsg(t, got, 5*time.Second, what)
	}
	for i := range 3 {
		sendN(t, c.Sender(), ch, 1)
		sent := time.Now()
		m := receive(fmt.Sprint("task ", i))
		if took := time.Since(sent); i > 0 && took >= latency/2 {
			t.Errorf("task %d delivered %s after it was sent, while a count (%s) was under way: it waited for the count", i, took, latency)
		}
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(latency + 200*time.Millisecond) // the late counts answer
	sendN(t, c.Sender(), ch, 2)
	for i := range 2 {
		if err := receive(fmt.Sprint("burst task ", i)).Ack(); err != nil {
			t.Fatal(err)
		}
	}
	if n := overAsk.Load(); n > 0 {
		t.Errorf("%d polls asked for more than was waiting", n)
	}
}

// TestPollerCountsALightQueueRarely: on a light queue every task comes from
// a peek; after a count that found nothing the Poller does not count again
// for OverlapAfter (a second here), so ten lone tasks cost at most two
// counts, not ten (a QueuesInfo costs KubeMQ a few ms of CPU), and each is
// still delivered.
func TestPollerCountsALightQueueRarely(t *testing.T) {
	tg := targets(t, fastBroker())[0]
	c := dial(t, tg)
	ch := chanName(t)
	got := make(chan *Message, 4)
	p := runPoller(t, c, PollerConfig{
		Channel: ch, OverlapAfter: time.Second,
		Deliver: deliverInto(got),
	})
	waitFor(t, 5*time.Second, "poller up", p.Up)
	start := time.Now()
	for i := range 10 {
		sendN(t, c.Sender(), ch, 1)
		ackNext(t, got, 5*time.Second, fmt.Sprint("task ", i))
	}
	st := p.Stats()
	took := time.Since(start)
	if most := 2 + int64(took/time.Second); st.Counts > most {
		t.Errorf("%d counts for 10 lone tasks in %s, want at most %d", st.Counts, took, most)
	}
	t.Logf("%d counts, %d peeks, %d polls for 10 lone tasks", st.Counts, st.Peeks, st.Polls)
}
