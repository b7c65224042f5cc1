package broker_test

// Conformance rows for queues (docs/KUBEMQ.md, "Redelivery and the dead
// letter queue" and the traps), through the real kubemq-go v1.9.0 clients.
// They run with the default 1 s poll floor so that they also pass against a
// real KubeMQ; each runs in parallel and takes a few seconds at most (the
// SDK itself sleeps 1 s when it opens each stream, trap 3).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kubemq-io/kubemq-go"
	qs "github.com/kubemq-io/kubemq-go/queues_stream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// queueStream opens a queues_stream client on tg, closed at cleanup. Its
// ctx lives as long as the test (trap 4).
func queueStream(t *testing.T, tg *target) (*qs.QueuesStreamClient, context.Context) {
	t.Helper()
	host, port := tg.hostPort(t)
	ctx, cancel := context.WithCancel(context.Background())
	c, err := qs.NewQueuesStreamClient(ctx, qs.WithAddress(host, port), qs.WithClientId(channel(t, "client")))
	if err != nil {
		cancel()
		t.Fatalf("queues stream client: %v", err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		cancel()
	})
	return c, ctx
}

// queueLegacy opens a legacy queues client on tg, closed at cleanup.
func queueLegacy(t *testing.T, tg *target) (*kubemq.QueuesClient, context.Context) {
	t.Helper()
	host, port := tg.hostPort(t)
	ctx, cancel := context.WithCancel(context.Background())
	c, err := kubemq.NewQueuesClient(ctx, kubemq.WithAddress(host, port),
		kubemq.WithClientId(channel(t, "legacy")), kubemq.WithTransportType(kubemq.TransportTypeGRPC))
	if err != nil {
		cancel()
		t.Fatalf("legacy queues client: %v", err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		cancel()
	})
	return c, ctx
}

// sendQ sends msgs to ch in one batch and fails the test on any error.
func sendQ(t *testing.T, ctx context.Context, c *qs.QueuesStreamClient, msgs ...*qs.QueueMessage) []string {
	t.Helper()
	res, err := c.Send(ctx, msgs...)
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	var ids []string
	for _, r := range res.Results {
		if r.IsError {
			t.Fatalf("send result: %s", r.Error)
		}
		ids = append(ids, r.MessageID)
	}
	return ids
}

func qmsg(ch, body string) *qs.QueueMessage {
	return qs.NewQueueMessage().SetChannel(ch).SetBody([]byte(body))
}

// pollQ polls ch (not auto-acked) and fails the test on an error.
func pollQ(t *testing.T, ctx context.Context, c *qs.QueuesStreamClient, ch string, max, waitMs int) *qs.PollResponse {
	t.Helper()
	resp, err := c.Poll(ctx, &qs.PollRequest{Channel: ch, MaxItems: max, WaitTimeout: waitMs,
		OnErrorFunc: func(err error) {
			if !errors.Is(err, context.Canceled) { // the client closing
				t.Errorf("poll %s: transaction error: %v", ch, err)
			}
		}})
	if err != nil {
		t.Fatalf("poll %s: %v", ch, err)
	}
	return resp
}

func bodies(msgs []*qs.QueueMessage) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, string(m.Body))
	}
	return out
}

// pollWant polls ch for max messages, waiting waitMs, and fails unless the
// bodies of what came back are want, in order; what names the poll.
func pollWant(t *testing.T, ctx context.Context, c *qs.QueuesStreamClient, ch string, max, waitMs int, what string, want ...string) *qs.PollResponse {
	t.Helper()
	r := pollQ(t, ctx, c, ch, max, waitMs)
	if got := bodies(r.Messages); !slices.Equal(got, want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
	return r
}

// pollShort is pollWant for a poll that asks for more than is there: it
// must also take its whole 1 s wait (trap 2).
func pollShort(t *testing.T, ctx context.Context, c *qs.QueuesStreamClient, ch string, max int, what string, want ...string) *qs.PollResponse {
	t.Helper()
	start := time.Now()
	r := pollWant(t, ctx, c, ch, max, 1000, what, want...)
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Errorf("%s returned after %v, want its whole 1 s wait", what, took)
	}
	return r
}

// ackAllQ settles a whole batch.
func ackAllQ(t *testing.T, r *qs.PollResponse, what string) {
	t.Helper()
	if err := r.AckAll(); err != nil {
		t.Fatalf("ack all of %s: %v", what, err)
	}
}

// strandedBack polls the one message a completed batch held unseen (body),
// checks that it comes back with no receive counted, and acks it.
func strandedBack(t *testing.T, ctx context.Context, c *qs.QueuesStreamClient, ch, body, what string) {
	t.Helper()
	r := pollWant(t, ctx, c, ch, 1, 3000, what, body)
	if rc := r.Messages[0].Attributes.ReceiveCount; rc != 1 {
		t.Errorf("%s ReceiveCount = %d after being held unseen, want 1", body, rc)
	}
	ackAllQ(t, r, body)
}

// peekQ peeks ch with the legacy client (it waits 1 s when it finds fewer
// than max).
func peekQ(t *testing.T, ctx context.Context, c *kubemq.QueuesClient, ch string, max int) *kubemq.ReceiveQueueMessagesResponse {
	t.Helper()
	resp, err := c.Peek(ctx, kubemq.NewReceiveQueueMessagesRequest().SetChannel(ch).
		SetMaxNumberOfMessages(max).SetWaitTimeSeconds(1))
	if err != nil {
		t.Fatalf("peek %s: %v", ch, err)
	}
	if resp.IsError {
		t.Fatalf("peek %s: %s", ch, resp.Error)
	}
	return resp
}

// waitingQ reports QueuesInfo's Waiting for ch (0 when it is not listed).
func waitingQ(t *testing.T, ctx context.Context, c *qs.QueuesStreamClient, ch string) int64 {
	t.Helper()
	return infoQ(t, ctx, c, ch).Waiting
}

// infoQ reports QueuesInfo's counters for ch (zero when it is not listed).
func infoQ(t *testing.T, ctx context.Context, c *qs.QueuesStreamClient, ch string) qs.QueueInfo {
	t.Helper()
	info, err := c.QueuesInfo(ctx, ch)
	if err != nil {
		t.Fatalf("queues info: %v", err)
	}
	for _, q := range info.Queues {
		if q.Name == ch {
			return *q
		}
	}
	return qs.QueueInfo{}
}

// queueEnv is what a conformance row gets: its target and a pool of
// queues_stream clients warmed up in parallel, so that no row pays the
// SDK's 1 s stream-opening sleeps (trap 3) itself.
type queueEnv struct {
	tg   *target
	warm chan warmStream
}

type warmStream struct {
	c   *qs.QueuesStreamClient
	ctx context.Context
}

// stream hands out a warm queues_stream client, closed at the end of the
// whole conformance test.
func (e *queueEnv) stream(t *testing.T) (*qs.QueuesStreamClient, context.Context) {
	t.Helper()
	select {
	case w := <-e.warm:
		return w.c, w.ctx
	default:
		t.Fatal("queue conformance: warm client pool exhausted; raise the row's client count")
		return nil, nil
	}
}

// legacy opens a legacy client (they do not sleep when opening).
func (e *queueEnv) legacy(t *testing.T) (*kubemq.QueuesClient, context.Context) {
	t.Helper()
	return queueLegacy(t, e.tg)
}

// warmStreams opens n queues_stream clients and opens both their streams
// with a send and a poll that returns at once.
func warmStreams(t *testing.T, tg *target, n int) chan warmStream {
	t.Helper()
	out := make(chan warmStream, n)
	var wg sync.WaitGroup
	for range n {
		c, ctx := queueStream(t, tg)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch := channel(t, "warm")
			if _, err := c.Send(ctx, qmsg(ch, "warm")); err != nil {
				t.Errorf("warm send: %v", err)
				return
			}
			if _, err := c.Poll(ctx, &qs.PollRequest{Channel: ch, MaxItems: 1, WaitTimeout: 1000, AutoAck: true}); err != nil {
				t.Errorf("warm poll: %v", err)
				return
			}
			out <- warmStream{c: c, ctx: ctx}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return out
}

// queueRows are the queue conformance rows and how many stream clients each
// takes from the pool.
var queueRows = []struct {
	name    string
	clients int
	run     func(t *testing.T, e *queueEnv)
}{
	{"SendPollAckAll", 1, rowQueueSendPollAckAll},
	{"NAckCountsAndGoesToTail", 1, rowQueueNAckCountsAndGoesToTail},
	{"DeadLetterAfterMaxReceive", 1, rowQueueDeadLetterAfterMaxReceive},
	{"MaxReceiveWithoutQueueDrops", 1, rowQueueMaxReceiveWithoutQueueDrops},
	{"DefaultPolicy", 1, rowQueueDefaultPolicy},
	{"Delay", 1, rowQueueDelay},
	{"ReQueue", 1, rowQueueReQueue},
	{"PeekDoesNotConsume", 1, rowQueuePeekDoesNotConsume},
	{"LegacyReceive", 0, rowQueueLegacyReceive},
	{"AckAllPurgesWaitingOnly", 1, rowQueueAckAllPurgesWaitingOnly},
	{"AckAllBlocksLegacyPeek", 1, rowQueueAckAllBlocksLegacyPeek},
	{"DisconnectRedeliversWithoutCount", 2, rowQueueDisconnectRedeliversWithoutCount},
	{"TwoClientsGetDisjointMessages", 2, rowQueueTwoClientsGetDisjointMessages},
	{"PollWaitsUnlessFull", 1, rowQueuePollWaitsUnlessFull},
	{"WaitFloor", 1, rowQueueWaitFloor},
	{"InfoWaiting", 1, rowQueuesInfoWaiting},
	{"ExpiredNotDelivered", 1, rowQueueExpiredNotDelivered},
	{"BadPollRequests", 1, rowQueueBadPollRequests},
	{"PartSettledBatchStrands", 1, rowQueuePartSettledBatchStrands},
	{"ClosedBatchStraysForcedOnNextPoll", 1, rowQueueClosedBatchStraysForcedOnNextPoll},
	{"ShortPollKeepsItsRoom", 1, rowQueueShortPollKeepsItsRoom},
	{"ClosingBatchStraysGoToAFullOpenBatch", 1, rowQueueClosingBatchStraysGoToAFullOpenBatch},
	{"BatchClosedWhileNothingWaitsStrandsNothing", 1, rowQueueBatchClosedWhileNothingWaitsStrandsNothing},
	{"PeekThenReceiveTakesWhatThePeekSaw", 0, rowQueuePeekThenReceiveTakesWhatThePeekSaw},
	{"BadNamesRefusedOnSendAndPeek", 1, rowQueueBadNamesRefusedOnSendAndPeek},
	{"SequencesCountFromOneAndWaitingDropsOnReceive", 1, rowQueueSequencesCountFromOne},
}

// TestQueueConformance runs the queue rows against each target, in
// parallel, each with its own warm clients and channels.
func TestQueueConformance(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		t.Parallel()
		n := 0
		for _, r := range queueRows {
			n += r.clients
		}
		e := &queueEnv{tg: tg, warm: warmStreams(t, tg, n)}
		for _, r := range queueRows {
			t.Run(r.name, func(t *testing.T) {
				t.Parallel()
				r.run(t, e)
			})
		}
	})
}

func rowQueueSendPollAckAll(t *testing.T, e *queueEnv) {
	c, ctx := e.stream(t)
	ch := channel(t, "q")
	m := qmsg(ch, "b0").SetMetadata("meta").AddTag("task_id", "t0")
	ids := sendQ(t, ctx, c, m, qmsg(ch, "b1"), qmsg(ch, "b2"))
	resp := pollQ(t, ctx, c, ch, 3, 5000)
	if got := bodies(resp.Messages); !slices.Equal(got, []string{"b0", "b1", "b2"}) {
		t.Fatalf("bodies = %v, want b0 b1 b2", got)
	}
	first := resp.Messages[0]
	if first.MessageID != ids[0] || first.Metadata != "meta" || first.Tags["task_id"] != "t0" || first.Channel != ch {
		t.Errorf("first message = %v; want id %s, metadata, tag, channel", first, ids[0])
	}
	for _, m := range resp.Messages {
		if m.Attributes.ReceiveCount != 1 {
			t.Errorf("%s: ReceiveCount = %d, want 1", m.Body, m.Attributes.ReceiveCount)
		}
		if m.Attributes.Sequence == 0 || m.Attributes.Timestamp == 0 {
			t.Errorf("%s: attributes %v lack sequence or timestamp", m.Body, m.Attributes)
		}
	}
	if err := resp.AckAll(); err != nil {
		t.Fatalf("ack all: %v", err)
	}
	waitFor(t, 3*time.Second, "queue drained", func() bool { return waitingQ(t, ctx, c, ch) == 0 })
}

func rowQueueNAckCountsAndGoesToTail(t *testing.T, e *queueEnv) {
	c, ctx := e.stream(t)
	ch := channel(t, "q")
	sendQ(t, ctx, c, qmsg(ch, "a"), qmsg(ch, "b"))
	r1 := pollQ(t, ctx, c, ch, 1, 1000)
	if got := bodies(r1.Messages); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("first poll = %v, want [a]", got)
	}
	if err := r1.Messages[0].NAck(); err != nil {
		t.Fatalf("nack: %v", err)
	}
	r2 := pollQ(t, ctx, c, ch, 2, 5000)
	if got := bodies(r2.Messages); !slices.Equal(got, []string{"b", "a"}) {
		t.Fatalf("after nack = %v, want [b a] (NAck goes to the tail)", got)
	}
	if rc := r2.Messages[1].Attributes.ReceiveCount; rc != 2 {
		t.Errorf("nacked message ReceiveCount = %d, want 2", rc)
	}
	if rc := r2.Messages[0].Attributes.ReceiveCount; rc != 1 {
		t.Errorf("untouched message ReceiveCount = %d, want 1", rc)
	}
	if err := r2.AckAll(); err != nil {
		t.Fatalf("ack all: %v", err)
	}
}

func rowQueueDeadLetterAfterMaxReceive(t *testing.T, e *queueEnv) {
	c, ctx := e.stream(t)
	ch, dlq := channel(t, "q"), channel(t, "dlq")
	m := qmsg(ch, "poison").SetMetadata("md").AddTag("k", "v").
		SetPolicyMaxReceiveCount(2).SetPolicyMaxReceiveQueue(dlq)
	ids := sendQ(t, ctx, c, m)
	for i := 1; i <= 2; i++ {
		r := pollQ(t, ctx, c, ch, 1, 2000)
		if len(r.Messages) != 1 {
			t.Fatalf("delivery %d: got %d messages", i, len(r.Messages))
		}
		if rc := r.Messages[0].Attributes.ReceiveCount; rc != int32(i) {
			t.Errorf("delivery %d: ReceiveCount = %d", i, rc)
		}
		if err := r.Messages[0].NAck(); err != nil {
			t.Fatalf("nack %d: %v", i, err)
		}
	}
	r := pollQ(t, ctx, c, dlq, 1, 3000)
	if len(r.Messages) != 1 {
		t.Fatalf("dead letter queue: got %d messages, want 1", len(r.Messages))
	}
	d := r.Messages[0]
	if d.MessageID != ids[0] || string(d.Body) != "poison" || d.Metadata != "md" || d.Tags["k"] != "v" {
		t.Errorf("dead letter = %v; want the same id, body, metadata and tags", d)
	}
	if !d.Attributes.ReRouted || d.Attributes.ReRoutedFromQueue != ch || d.Attributes.ReceiveCount != 1 {
		t.Errorf("dead letter attributes = %v; want ReRouted from %s, ReceiveCount 1", d.Attributes, ch)
	}
	if err := r.AckAll(); err != nil {
		t.Fatalf("ack all: %v", err)
	}
	if n := waitingQ(t, ctx, c, ch); n != 0 {
		t.Errorf("origin still has %d waiting", n)
	}
}

func rowQueueMaxReceiveWithoutQueueDrops(t *testing.T, e *queueEnv) {
	c, ctx := e.stream(t)
	lc, lctx := e.legacy(t)
	ch := channel(t, "q")
	sendQ(t, ctx, c, qmsg(ch, "once").SetPolicyMaxReceiveCount(1))
	r := pollQ(t, ctx, c, ch, 1, 2000)
	if len(r.Messages) != 1 {
		t.Fatalf("got %d messages, want 1", len(r.Messages))
	}
	if err := r.Messages[0].NAck(); err != nil {
		t.Fatalf("nack: %v", err)
	}
	if p := peekQ(t, lctx, lc, ch, 1); len(p.Messages) != 0 {
		t.Fatalf("message still there after its last NAck: %v", p.Messages[0])
	}
}

func rowQueueDefaultPolicy(t *testing.T, e *queueEnv) {
	c, ctx := e.stream(t)
	ch := channel(t, "q")
	sendQ(t, ctx, c, qmsg(ch, "x"))
	r := pollQ(t, ctx, c, ch, 1, 2000)
	if len(r.Messages) != 1 {
		t.Fatalf("got %d messages, want 1", len(r.Messages))
	}
	if got := r.Messages[0].Policy.GetMaxReceiveCount(); got != 1024 {
		t.Errorf("policy MaxReceiveCount = %d, want the default 1024", got)
	}
	if err := r.AckAll(); err != nil {
		t.Fatalf("ack all: %v", err)
	}
}

func rowQueueDelay(t *testing.T, e *queueEnv) {
	c, ctx := e.stream(t)
	ch := channel(t, "q")
	start := time.Now()
	sendQ(t, ctx, c, qmsg(ch, "later").SetPolicyDelaySeconds(1))
	r := pollQ(t, ctx, c, ch, 1, 4000)
	took := time.Since(start)
	if len(r.Messages) != 1 {
		t.Fatalf("got %d messages after %v, want 1", len(r.Messages), took)
	}
	if took < 900*time.Millisecond {
		t.Errorf("delayed message delivered after %v, want >= 1 s", took)
	}
	// Real KubeMQ v2.4.0 delivers a delayed message with DelayedTo = 0
	// (measured against it); the embedded broker reports the due time.
	// Nothing in inferq reads it, so the real broker is the odd one here.
	if !e.tg.Real && r.Messages[0].Attributes.DelayedTo == 0 {
		t.Errorf("DelayedTo not set: %v", r.Messages[0].Attributes)
	}
	if err := r.AckAll(); err != nil {
		t.Fatalf("ack all: %v", err)
	}
}

func rowQueueReQueue(t *testing.T, e *queueEnv) {
	c, ctx := e.stream(t)
	ch, other := channel(t, "q"), channel(t, "other")
	ids := sendQ(t, ctx, c, qmsg(ch, "moved").AddTag("k", "v"))
	r := pollQ(t, ctx, c, ch, 1, 2000)
	if len(r.Messages) != 1 {
		t.Fatalf("got %d messages, want 1", len(r.Messages))
	}
	if err := r.Messages[0].ReQueue(other); err != nil {
		t.Fatalf("requeue: %v", err)
	}
	r2 := pollQ(t, ctx, c, other, 1, 3000)
	if len(r2.Messages) != 1 {
		t.Fatalf("other channel: got %d messages, want 1", len(r2.Messages))
	}
	m := r2.Messages[0]
	if m.MessageID != ids[0] || string(m.Body) != "moved" || m.Tags["k"] != "v" || m.Channel != other {
		t.Errorf("requeued message = %v", m)
	}
	if m.Attributes.ReceiveCount != 1 {
		t.Errorf("requeued ReceiveCount = %d, want 1", m.Attributes.ReceiveCount)
	}
	if err := r2.AckAll(); err != nil {
		t.Fatalf("ack all: %v", err)
	}
	if n := waitingQ(t, ctx, c, ch); n != 0 {
		t.Errorf("origin still has %d waiting", n)
	}
}

func rowQueuePeekDoesNotConsume(t *testing.T, e *queueEnv) {
	c, ctx := e.stream(t)
	lc, lctx := e.legacy(t)
	ch := channel(t, "q")
	sendQ(t, ctx, c, qmsg(ch, "p0"), qmsg(ch, "p1"))
	for range 2 {
		p := peekQ(t, lctx, lc, ch, 2)
		if !p.IsPeak || len(p.Messages) != 2 || string(p.Messages[0].Body) != "p0" {
			t.Fatalf("peek = %d messages (IsPeak %v), want p0 p1", len(p.Messages), p.IsPeak)
		}
	}
	r := pollQ(t, ctx, c, ch, 2, 3000)
	if got := bodies(r.Messages); !slices.Equal(got, []string{"p0", "p1"}) {
		t.Fatalf("poll after peeks = %v", got)
	}
	for _, m := range r.Messages {
		if m.Attributes.ReceiveCount != 1 {
			t.Errorf("%s: ReceiveCount %d after peeks, want 1", m.Body, m.Attributes.ReceiveCount)
		}
	}
	if err := r.AckAll(); err != nil {
		t.Fatalf("ack all: %v", err)
	}
}

func rowQueueLegacyReceive(t *testing.T, e *queueEnv) {
	lc, ctx := e.legacy(t)
	ch := channel(t, "q")
	var batch []*kubemq.QueueMessage
	for i := range 3 {
		batch = append(batch, kubemq.NewQueueMessage().SetChannel(ch).SetBody([]byte(fmt.Sprint("l", i))))
	}
	res, err := lc.Batch(ctx, batch)
	if err != nil || len(res) != 3 || res[0].IsError {
		t.Fatalf("batch send: %v %v", res, err)
	}
	one, err := lc.Send(ctx, kubemq.NewQueueMessage().SetChannel(ch).SetMetadata("only-meta"))
	if err != nil || one.IsError {
		t.Fatalf("send: %v %v", one, err)
	}
	got, err := lc.Pull(ctx, kubemq.NewReceiveQueueMessagesRequest().SetChannel(ch).
		SetMaxNumberOfMessages(4).SetWaitTimeSeconds(2))
	if err != nil || got.IsError {
		t.Fatalf("receive: %v %v", got, err)
	}
	if got.MessagesReceived != 4 || len(got.Messages) != 4 || got.Messages[3].Metadata != "only-meta" {
		t.Fatalf("received %d messages, want 4 ending with only-meta", len(got.Messages))
	}
	if rc := got.Messages[0].Attributes.ReceiveCount; rc != 1 {
		t.Errorf("ReceiveCount = %d, want 1", rc)
	}
	bad, err := lc.Send(ctx, kubemq.NewQueueMessage().SetChannel(ch))
	if err != nil || !bad.IsError {
		t.Errorf("empty message: result %v, err %v; want a result error", bad, err)
	}
}

func rowQueueAckAllPurgesWaitingOnly(t *testing.T, e *queueEnv) {
	c, ctx := e.stream(t)
	lc, lctx := e.legacy(t)
	ch := channel(t, "q")
	sendQ(t, ctx, c, qmsg(ch, "held"), qmsg(ch, "w1"), qmsg(ch, "w2"))
	r := pollQ(t, ctx, c, ch, 1, 2000)
	if len(r.Messages) != 1 {
		t.Fatalf("got %d messages, want 1", len(r.Messages))
	}
	start := time.Now()
	res, err := c.AckAll(ctx, qs.NewAckAllRequest().SetChannel(ch).SetWaitTimeSeconds(1))
	took := time.Since(start)
	if err != nil || res.IsError {
		t.Fatalf("ack all: %v %v", res, err)
	}
	if res.AffectedMessages != 2 {
		t.Errorf("AffectedMessages = %d, want 2 (the held one is in flight)", res.AffectedMessages)
	}
	if took < 900*time.Millisecond {
		t.Errorf("ack all returned after %v; KubeMQ blocks for its whole wait", took)
	}
	if err := r.Messages[0].NAck(); err != nil {
		t.Fatalf("nack: %v", err)
	}
	waitFor(t, 3*time.Second, "the held message back", func() bool {
		p := peekQ(t, lctx, lc, ch, 1)
		return len(p.Messages) == 1 && string(p.Messages[0].Body) == "held"
	})
}

// A legacy peek sent while a purge runs waits for the purge to end before
// its own wait starts (KUBEMQ.md fact 28: one broker client serves a
// channel's legacy calls, the purge included), so it sees a message written
// right after the purge, although its 1 s wait is shorter than the 2 s
// purge. The Python adapter's soft cancel relies on nothing else, and
// inferq's removal of a result channel's old record meets it (trap 24).
func rowQueueAckAllBlocksLegacyPeek(t *testing.T, e *queueEnv) {
	c, ctx := e.stream(t)
	lc, lctx := e.legacy(t)
	ch := channel(t, "q")
	sendQ(t, ctx, c, qmsg(ch, "before"))
	purged := make(chan error, 1)
	go func() {
		res, err := c.AckAll(ctx, qs.NewAckAllRequest().SetChannel(ch).SetWaitTimeSeconds(2))
		if err == nil && res.IsError {
			err = errors.New(res.Error)
		}
		if err == nil {
			_, err = c.Send(ctx, qmsg(ch, "after"))
		}
		purged <- err
	}()
	waitFor(t, 3*time.Second, "the purge to take the waiting message", func() bool { return waitingQ(t, ctx, c, ch) == 0 })
	p := peekQ(t, lctx, lc, ch, 1)
	if err := <-purged; err != nil {
		t.Fatalf("purge, then send: %v", err)
	}
	var got []string
	for _, m := range p.Messages {
		got = append(got, string(m.Body))
	}
	if len(got) != 1 || got[0] != "after" {
		t.Errorf("a peek sent during the purge got %v, want [after]: it must wait for the purge to end", got)
	}
}

func rowQueueDisconnectRedeliversWithoutCount(t *testing.T, e *queueEnv) {
	a, actx := e.stream(t)
	b, bctx := e.stream(t)
	ch := channel(t, "q")
	sendQ(t, actx, a, qmsg(ch, "m0"), qmsg(ch, "m1"))
	r := pollQ(t, actx, a, ch, 2, 3000)
	if len(r.Messages) != 2 {
		t.Fatalf("a got %d messages, want 2", len(r.Messages))
	}
	if err := a.Close(); err != nil {
		t.Fatalf("close a: %v", err)
	}
	r2 := pollQ(t, bctx, b, ch, 2, 5000)
	if got := bodies(r2.Messages); len(got) != 2 {
		t.Fatalf("b got %v, want m0 and m1 back", got)
	}
	for _, m := range r2.Messages {
		if m.Attributes.ReceiveCount != 1 {
			t.Errorf("%s: ReceiveCount %d after a disconnect, want 1 (a crash is not a receive)", m.Body, m.Attributes.ReceiveCount)
		}
	}
	if err := r2.AckAll(); err != nil {
		t.Fatalf("ack all: %v", err)
	}
}

func rowQueueTwoClientsGetDisjointMessages(t *testing.T, e *queueEnv) {
	const total = 200
	a, actx := e.stream(t)
	b, bctx := e.stream(t)
	ch := channel(t, "q")
	var msgs []*qs.QueueMessage
	for i := range total {
		msgs = append(msgs, qmsg(ch, fmt.Sprint(i)))
	}
	sendQ(t, actx, a, msgs...)
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	drain := func(c *qs.QueuesStreamClient, ctx context.Context) {
		defer wg.Done()
		for {
			mu.Lock()
			done := len(seen) >= total
			mu.Unlock()
			if done {
				return
			}
			r, err := c.Poll(ctx, &qs.PollRequest{Channel: ch, MaxItems: 10, WaitTimeout: 1000})
			if err != nil {
				t.Errorf("poll: %v", err)
				return
			}
			if len(r.Messages) == 0 {
				continue
			}
			mu.Lock()
			for _, m := range r.Messages {
				seen[string(m.Body)]++
			}
			mu.Unlock()
			if err := r.AckAll(); err != nil {
				t.Errorf("ack all: %v", err)
				return
			}
		}
	}
	wg.Add(2)
	go drain(a, actx)
	go drain(b, bctx)
	wg.Wait()
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	switch {
	case len(seen) != total:
		t.Errorf("saw %d distinct messages, want %d", len(seen), total)
	case dups > 0 && e.tg.Real:
		t.Logf("real KubeMQ delivered %d duplicates to parallel pollers (trap 12)", dups)
	case dups > 0:
		t.Errorf("%d duplicate deliveries between two clients", dups)
	}
}

func rowQueuePollWaitsUnlessFull(t *testing.T, e *queueEnv) {
	c, ctx := e.stream(t)
	full, part := channel(t, "full"), channel(t, "part")
	sendQ(t, ctx, c, qmsg(full, "1"), qmsg(full, "2"), qmsg(full, "3"), qmsg(part, "only"))
	// The first poll also opens the SDK's stream (trap 3): measure the second.
	start := time.Now()
	r := pollQ(t, ctx, c, part, 4, 1500)
	took := time.Since(start)
	if len(r.Messages) != 1 {
		t.Fatalf("partial poll: %d messages, want 1", len(r.Messages))
	}
	if took < 1400*time.Millisecond {
		t.Errorf("partial poll returned after %v, want its whole 1.5 s wait (trap 2)", took)
	}
	_ = r.AckAll()
	start = time.Now()
	r = pollQ(t, ctx, c, full, 3, 5000)
	if took := time.Since(start); len(r.Messages) != 3 || took > 500*time.Millisecond {
		t.Errorf("full poll: %d messages after %v; want 3 at once", len(r.Messages), took)
	}
	_ = r.AckAll()
}

func rowQueueWaitFloor(t *testing.T, e *queueEnv) {
	c, ctx := e.stream(t)
	ch := channel(t, "empty")
	start := time.Now()
	r := pollQ(t, ctx, c, ch, 1, 100)
	took := time.Since(start)
	if len(r.Messages) != 0 {
		t.Fatalf("empty channel gave %d messages", len(r.Messages))
	}
	if took < 900*time.Millisecond {
		t.Errorf("a 100 ms poll on an empty channel returned after %v; the floor is 1 s (trap 1)", took)
	}
}

func rowQueuesInfoWaiting(t *testing.T, e *queueEnv) {
	c, ctx := e.stream(t)
	ch, other := channel(t, "q"), channel(t, "other")
	sendQ(t, ctx, c, qmsg(ch, "1"), qmsg(ch, "2"), qmsg(ch, "3"), qmsg(other, "x"))
	info, err := c.QueuesInfo(ctx, ch+";"+other)
	if err != nil {
		t.Fatalf("queues info: %v", err)
	}
	if info.TotalQueues != 2 || info.Waiting != 4 {
		t.Errorf("info = %d queues, %d waiting; want 2 and 4", info.TotalQueues, info.Waiting)
	}
	if n := waitingQ(t, ctx, c, ch); n != 3 {
		t.Errorf("%s waiting = %d, want 3", ch, n)
	}
	// Waiting counts the messages delivered and not yet settled too (real
	// KubeMQ v2.4.0: pending + LastSequence - the highest sequence sent out
	// and acked); an ack lowers it.
	r := pollQ(t, ctx, c, ch, 2, 2000)
	if len(r.Messages) != 2 {
		t.Fatalf("polled %d, want 2", len(r.Messages))
	}
	if n := waitingQ(t, ctx, c, ch); n != 3 {
		t.Errorf("%s waiting with 2 held = %d, want 3 (held messages count)", ch, n)
	}
	if err := r.AckAll(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "waiting to drop to 1 after the ack", func() bool { return waitingQ(t, ctx, c, ch) == 1 })
}

func rowQueueExpiredNotDelivered(t *testing.T, e *queueEnv) {
	c, ctx := e.stream(t)
	lc, lctx := e.legacy(t)
	ch := channel(t, "q")
	sendQ(t, ctx, c, qmsg(ch, "stale").SetPolicyExpirationSeconds(1))
	time.Sleep(1200 * time.Millisecond) // let it expire: the row is about time passing
	sendQ(t, ctx, c, qmsg(ch, "fresh"))
	// The legacy receive skips the expired message (a stream poll that
	// meets only expired ones hits trap 8 on a real KubeMQ).
	got, err := lc.Pull(lctx, kubemq.NewReceiveQueueMessagesRequest().SetChannel(ch).
		SetMaxNumberOfMessages(1).SetWaitTimeSeconds(2))
	if err != nil || got.IsError {
		t.Fatalf("receive: %v %v", got, err)
	}
	if len(got.Messages) != 1 || string(got.Messages[0].Body) != "fresh" {
		t.Fatalf("received %v, want only the fresh message", got.Messages)
	}
	if got.MessagesExpired != 1 {
		t.Errorf("MessagesExpired = %d, want 1", got.MessagesExpired)
	}
}

// errText unwraps err's text for the SDK's plain-string errors.
func errText(err error) string {
	if err == nil {
		return ""
	}
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.GRPCStatus().Message()
	}
	return strings.TrimSpace(err.Error())
}

func rowQueueBadPollRequests(t *testing.T, e *queueEnv) {
	c, ctx := e.stream(t)
	for _, ch := range []string{"bad channel", "ends.", "wild*", "wild>"} {
		_, err := c.Poll(ctx, &qs.PollRequest{Channel: ch, MaxItems: 1, WaitTimeout: 1000})
		if err == nil || !strings.Contains(errText(err), "Error 120") {
			t.Errorf("poll %q: err %v, want Error 120", ch, err)
		}
	}
	// A settled transaction refuses more settlements.
	ch := channel(t, "q")
	sendQ(t, ctx, c, qmsg(ch, "x"))
	errs := make(chan error, 4)
	r, err := c.Poll(ctx, &qs.PollRequest{Channel: ch, MaxItems: 1, WaitTimeout: 2000,
		OnErrorFunc: func(err error) { errs <- err }})
	if err != nil || len(r.Messages) != 1 {
		t.Fatalf("poll: %v", err)
	}
	if err := r.AckOffsets(int64(r.Messages[0].Attributes.Sequence) + 1000); err != nil {
		t.Fatalf("ack unknown offset: %v", err)
	}
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), "sequence") {
			t.Errorf("unknown offset error = %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Errorf("no error for an unknown offset")
	}
	if err := r.AckAll(); err != nil {
		t.Fatalf("ack all: %v", err)
	}
}

func TestQueueOversizedMessageRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 200 MiB")
	}
	forEachTarget(t, func(t *testing.T, tg *target) {
		lc, ctx := queueLegacy(t, tg)
		ch := channel(t, "big")
		body := make([]byte, 100<<20+1)
		_, err := lc.Send(ctx, kubemq.NewQueueMessage().SetChannel(ch).SetBody(body))
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("100 MiB + 1 body: err %v, want ResourceExhausted", err)
		}
		// The connection still works.
		res, err := lc.Send(ctx, kubemq.NewQueueMessage().SetChannel(ch).SetBody([]byte("small")))
		if err != nil || res.IsError {
			t.Fatalf("small send after the refusal: %v %v", res, err)
		}
	})
}

// rowQueuePartSettledBatchStrands: trap 13. Settling part of a poll's
// batch makes room in its subscription and the broker pushes the next
// message there, where no poll or peek sees it until the batch completes;
// it comes back without a receive counted.
func rowQueuePartSettledBatchStrands(t *testing.T, e *queueEnv) {
	c, ctx := e.stream(t)
	lc, lctx := e.legacy(t)
	ch := channel(t, "q")
	sendQ(t, ctx, c, qmsg(ch, "m0"), qmsg(ch, "m1"), qmsg(ch, "m2"), qmsg(ch, "m3"), qmsg(ch, "m4"), qmsg(ch, "m5"))
	a := pollWant(t, ctx, c, ch, 2, 2000, "first poll", "m0", "m1")
	if err := a.AckOffsets(int64(a.Messages[0].Attributes.Sequence)); err != nil {
		t.Fatalf("ack m0: %v", err)
	}
	// m2 is stranded in the first batch's room: a poll for the 4 left
	// gets 3, after its whole wait (trap 2), and a peek sees none of them.
	b := pollShort(t, ctx, c, ch, 4, "poll after a partial ack (m2 stranded)", "m3", "m4", "m5")
	ackAllQ(t, b, "the second batch")
	if p := peekQ(t, lctx, lc, ch, 1); len(p.Messages) != 0 {
		t.Fatalf("peek saw %v while the first batch is open, want nothing", p.Messages[0].Body)
	}
	if n := waitingQ(t, ctx, c, ch); n < 2 {
		t.Errorf("waiting = %d with m1 held and m2 stranded, want at least 2", n)
	}
	// Completing the first batch gives m2 back, not counted as a receive.
	if err := a.AckOffsets(int64(a.Messages[1].Attributes.Sequence)); err != nil {
		t.Fatalf("ack m1: %v", err)
	}
	strandedBack(t, ctx, c, ch, "m2", "poll after the batch completed")
}

// rowQueueClosedBatchStraysForcedOnNextPoll: fact 45. A batch that
// completes with no other batch open strays what its settlement made room
// for (messages that arrived while it ran), and the next poll is handed all
// of it but keeps only what it asked for: a poll of one takes the first,
// and the second stays in that poll's batch, where a poll beside it does
// not see it, until the batch completes. What mq.Poller's count after a
// busy batch relies on.
func rowQueueClosedBatchStraysForcedOnNextPoll(t *testing.T, e *queueEnv) {
	c, ctx := e.stream(t)
	ch := channel(t, "q")
	sendQ(t, ctx, c, qmsg(ch, "a0"), qmsg(ch, "a1"))
	a := pollWant(t, ctx, c, ch, 2, 2000, "first poll", "a0", "a1")
	// b0 b1 b2 arrive while a runs; its settlement makes room for two.
	sendQ(t, ctx, c, qmsg(ch, "b0"), qmsg(ch, "b1"), qmsg(ch, "b2"))
	ackAllQ(t, a, "a")
	r := pollWant(t, ctx, c, ch, 1, 3000, "poll of one after a completed", "b0")
	// b1 was handed to r's batch with b0: a poll beside it gets b2 alone,
	// after its whole wait.
	ackAllQ(t, pollShort(t, ctx, c, ch, 2, "poll beside r (b1 held in r's batch)", "b2"), "s")
	ackAllQ(t, r, "r")
	// r's completion gives b1 back, not counted as a receive.
	strandedBack(t, ctx, c, ch, "b1", "poll after r completed")
}

// rowQueueShortPollKeepsItsRoom: trap 13 from the start. A poll that came
// back with less than it asked for (after its whole wait, trap 2) keeps the
// rest of its room while its batch is open: a message that arrives then is
// pushed there, where a poll beside it does not see it, and comes back
// when the batch completes. What mq.Poller's holding batches rely on.
func rowQueueShortPollKeepsItsRoom(t *testing.T, e *queueEnv) {
	c, ctx := e.stream(t)
	ch := channel(t, "q")
	sendQ(t, ctx, c, qmsg(ch, "a0"))
	a := pollShort(t, ctx, c, ch, 2, "short poll", "a0")
	sendQ(t, ctx, c, qmsg(ch, "b0"))
	pollShort(t, ctx, c, ch, 1, "poll beside the short batch (b0 in its room)")
	ackAllQ(t, a, "a")
	strandedBack(t, ctx, c, ch, "b0", "poll after the short batch completed")
}

// rowQueueClosingBatchStraysGoToAFullOpenBatch: fact 40. A batch's last
// settlement frees its room, the broker fills it from the queue before the
// batch closes, and the close hands what it holds to another open batch of
// the channel whatever that one's room: a full batch beside it holds the
// stray, unseen by a later poll beside both, until it completes. Why a busy
// channel has one open batch at a time (mq.Poller, consumer's pipe and
// spread, results' compat writes). And what mq.Poller's count after such a
// close relies on (facts 39, 45, 47): Waiting counts the stray, and the
// channel's sequences number its messages one by one, LastSequence the last
// stored, so the stray shows as a sequence never received.
//
// On KubeMQ the handed-over stray is redelivered 100 ms after the close
// (fact 26), to a poll beside that waits then, else back to the full batch,
// which drops it until it completes; the embedded broker holds it in the
// full batch at once. Nothing in inferq polls beside such a close, so the
// row polls beside only once that timer is past.
func rowQueueClosingBatchStraysGoToAFullOpenBatch(t *testing.T, e *queueEnv) {
	c, ctx := e.stream(t)
	ch, sync := channel(t, "q"), channel(t, "sync")
	sendQ(t, ctx, c, qmsg(ch, "a0"), qmsg(ch, "a1"), qmsg(ch, "b0"), qmsg(sync, "s"))
	a := pollWant(t, ctx, c, ch, 2, 2000, "poll a (full: no room left)", "a0", "a1")
	b := pollWant(t, ctx, c, ch, 1, 2000, "poll b beside a", "b0")
	var seqs []uint64
	for _, m := range append(a.Messages, b.Messages...) {
		seqs = append(seqs, m.Attributes.Sequence)
	}
	if seqs[1] != seqs[0]+1 || seqs[2] != seqs[1]+1 {
		t.Fatalf("sequences of a0 a1 b0 = %v, want consecutive", seqs)
	}
	// x waits while both batches are full; b's settlement makes room for
	// it, and b's close moves it into a. A poll on this stream is served
	// once b is closed (fact 21).
	sendQ(t, ctx, c, qmsg(ch, "x"))
	ackAllQ(t, b, "b")
	ackAllQ(t, pollWant(t, ctx, c, sync, 1, 2000, "poll after b's settlement", "s"), "s")
	time.Sleep(300 * time.Millisecond) // past KubeMQ's 100 ms redelivery of x
	pollShort(t, ctx, c, ch, 1, "poll beside a (x held in a)")
	info := infoQ(t, ctx, c, ch)
	if info.Waiting != 3 {
		t.Errorf("waiting = %d with a0 a1 held and x stranded in a, want 3", info.Waiting)
	}
	if want := int64(seqs[2]) + 1; info.LastSequence != want {
		t.Errorf("LastSequence = %d, want %d (x, stored after b0 and never received)", info.LastSequence, want)
	}
	ackAllQ(t, a, "a")
	strandedBack(t, ctx, c, ch, "x", "poll after a completed")
}

// rowQueueBatchClosedWhileNothingWaitsStrandsNothing: fact 47. A batch
// that completes beside a full open batch while nothing waits in the queue
// strands nothing, and a count then finds every stored sequence received
// and nothing waiting beyond the open batch: mq.Poller's quiet close, after
// which it polls beside the open batch again. The next message goes to the
// next poll at once.
func rowQueueBatchClosedWhileNothingWaitsStrandsNothing(t *testing.T, e *queueEnv) {
	c, ctx := e.stream(t)
	ch, sync := channel(t, "q"), channel(t, "sync")
	sendQ(t, ctx, c, qmsg(ch, "a0"), qmsg(ch, "a1"), qmsg(ch, "b0"), qmsg(sync, "s"))
	a := pollWant(t, ctx, c, ch, 2, 2000, "poll a (full: no room left)", "a0", "a1")
	b := pollWant(t, ctx, c, ch, 1, 2000, "poll b beside a", "b0")
	ackAllQ(t, b, "b")
	// A poll on this stream is served once b is closed (fact 21).
	ackAllQ(t, pollWant(t, ctx, c, sync, 1, 2000, "poll after b's settlement", "s"), "s")
	info := infoQ(t, ctx, c, ch)
	if info.Waiting != 2 || info.LastSequence != int64(b.Messages[0].Attributes.Sequence) {
		t.Errorf("count after b closed: waiting %d, LastSequence %d; want 2 (a's) and %d (b0's): nothing stranded",
			info.Waiting, info.LastSequence, b.Messages[0].Attributes.Sequence)
	}
	sendQ(t, ctx, c, qmsg(ch, "c0"))
	start := time.Now()
	r := pollWant(t, ctx, c, ch, 1, 2000, "poll beside a after b closed", "c0")
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("poll of c0 took %v, want at once", took)
	}
	ackAllQ(t, r, "c0")
	ackAllQ(t, a, "a")
}

// rowQueuePeekThenReceiveTakesWhatThePeekSaw: facts 22, 26, 44. With no
// batch of the channel open, a legacy peek leaves what it saw at the head
// of the queue (its close hands it back to the group at once), so the
// legacy receive that follows takes that very message, uncounted before,
// and the rest stays. What mq.Conn.TakeWhile relies on.
func rowQueuePeekThenReceiveTakesWhatThePeekSaw(t *testing.T, e *queueEnv) {
	lc, ctx := e.legacy(t)
	ch := channel(t, "q")
	res, err := lc.Batch(ctx, []*kubemq.QueueMessage{
		kubemq.NewQueueMessage().SetChannel(ch).SetBody([]byte("r0")),
		kubemq.NewQueueMessage().SetChannel(ch).SetBody([]byte("r1")),
	})
	if err != nil || len(res) != 2 || res[0].IsError || res[1].IsError {
		t.Fatalf("batch send: %v %v", res, err)
	}
	for _, want := range []string{"r0", "r1"} {
		p := peekQ(t, ctx, lc, ch, 1)
		if len(p.Messages) != 1 || string(p.Messages[0].Body) != want {
			t.Fatalf("peek = %d messages, want %s", len(p.Messages), want)
		}
		got, err := lc.Pull(ctx, kubemq.NewReceiveQueueMessagesRequest().SetChannel(ch).
			SetMaxNumberOfMessages(1).SetWaitTimeSeconds(1))
		if err != nil || got.IsError {
			t.Fatalf("receive: %v %v", got, err)
		}
		if len(got.Messages) != 1 || string(got.Messages[0].Body) != want {
			t.Fatalf("receive after a peek of %s got %d messages (%v), want %s", want, len(got.Messages), got.Messages, want)
		}
		if rc := got.Messages[0].Attributes.ReceiveCount; rc != 1 {
			t.Errorf("%s: ReceiveCount %d after a peek and a receive, want 1", want, rc)
		}
	}
}

// rowQueueSequencesCountFromOne: fact 48. A channel's sequences start at 1
// and grow by one per message stored; a legacy receive lowers Waiting and
// leaves LastSequence. mq.Conn.TakeWhile counts on it: a peeked head with
// sequence s is the oldest when every smaller sequence was received, or
// when Waiting is no more than LastSequence - s + 1.
func rowQueueSequencesCountFromOne(t *testing.T, e *queueEnv) {
	c, ctx := e.stream(t)
	lc, lctx := e.legacy(t)
	ch := channel(t, "q")
	sendQ(t, ctx, c, qmsg(ch, "s0"), qmsg(ch, "s1"), qmsg(ch, "s2"))
	p := peekQ(t, lctx, lc, ch, 3)
	for i, m := range p.Messages {
		if m.Attributes.Sequence != uint64(i+1) {
			t.Errorf("message %d (%s) has sequence %d, want %d", i, m.Body, m.Attributes.Sequence, i+1)
		}
	}
	got, err := lc.Pull(lctx, kubemq.NewReceiveQueueMessagesRequest().SetChannel(ch).
		SetMaxNumberOfMessages(1).SetWaitTimeSeconds(1))
	if err != nil || got.IsError || len(got.Messages) != 1 {
		t.Fatalf("receive: %v %v", got, err)
	}
	waitFor(t, 3*time.Second, "Waiting 2 and LastSequence 3 after a receive", func() bool {
		q := infoQ(t, ctx, c, ch)
		return q.Waiting == 2 && q.LastSequence == 3
	})
	if q := infoQ(t, ctx, c, ch); q.Waiting != 2 || q.LastSequence != 3 {
		t.Errorf("after one receive of three: Waiting %d, LastSequence %d; want 2 and 3", q.Waiting, q.LastSequence)
	}
}

// refusedNameText reports whether text is one of the broker's refusals of
// a channel name that mq.ErrRefused recognises (mq/errors.go refusedName).
func refusedNameText(text string) bool {
	m := strings.ToLower(text)
	for _, code := range []string{"error 102:", "error 107:", "error 108:", "error 119:", "error 120:"} {
		if strings.Contains(m, code) {
			return true
		}
	}
	return strings.Contains(m, "invalid queue name") || strings.Contains(m, "invalid channel value")
}

// rowQueueBadNamesRefusedOnSendAndPeek: trap 19. A queue name with a
// space, '*', '>' or a trailing '.' is refused, with a text that names the
// refusal, by every queue call inferq makes with a name it was given: the
// stream send, the legacy send and the legacy peek (polls:
// BadPollRequests). mq maps those texts to ErrRefused, which nothing
// retries. (A newline, which damages the real broker, is left to
// task.CheckName and to TestControlCharactersInChannelNames.)
func rowQueueBadNamesRefusedOnSendAndPeek(t *testing.T, e *queueEnv) {
	c, ctx := e.stream(t)
	lc, lctx := e.legacy(t)
	base := channel(t, "q")
	for _, ch := range []string{"bad " + base, base + ".", base + ".*", base + ".>"} {
		res, err := c.Send(ctx, qmsg(ch, "x"))
		text := errText(err)
		if err == nil && len(res.Results) == 1 {
			text = res.Results[0].Error
		}
		if !refusedNameText(text) {
			t.Errorf("stream send to %q: %v %v, want a refusal of the name", ch, res, err)
		}
		one, err := lc.Send(lctx, kubemq.NewQueueMessage().SetChannel(ch).SetBody([]byte("x")))
		if err == nil && (one == nil || !one.IsError || !refusedNameText(one.Error)) || err != nil && !refusedNameText(errText(err)) {
			t.Errorf("legacy send to %q: %v %v, want a refusal of the name", ch, one, err)
		}
		p, err := lc.Peek(lctx, kubemq.NewReceiveQueueMessagesRequest().SetChannel(ch).
			SetMaxNumberOfMessages(1).SetWaitTimeSeconds(1))
		if err == nil && (p == nil || !p.IsError || !refusedNameText(p.Error)) || err != nil && !refusedNameText(errText(err)) {
			t.Errorf("peek of %q: %v %v, want a refusal of the name", ch, p, err)
		}
	}
}
