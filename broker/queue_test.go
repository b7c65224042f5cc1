package broker_test

// Unit tests of the embedded broker's queues that need no real KubeMQ:
// raw protocol requests (what kubemq-go never sends), limits, Stop and
// Restart, Close and goroutine leaks. They use a short poll floor.

import (
	"context"
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/broker/brokertest"
	"github.com/kubemq-io/kubemq-go"
	pb "github.com/kubemq-io/protobuf/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// fastOpts keeps unit tests quick: 50 ms poll floor, 10 ms "seconds".
var fastOpts = broker.Options{PollWaitFloor: 50 * time.Millisecond, SecondLength: 10 * time.Millisecond}

// rawClient dials addr with plain gRPC, for requests kubemq-go never makes.
func rawClient(t testing.TB, addr string) pb.KubemqClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewKubemqClient(conn)
}

// rawSend sends bodies to ch with the legacy batch call.
func rawSend(t testing.TB, c pb.KubemqClient, ch string, bodies ...string) {
	t.Helper()
	req := &pb.QueueMessagesBatchRequest{BatchID: "b"}
	for _, b := range bodies {
		req.Messages = append(req.Messages, &pb.QueueMessage{ClientID: "raw", Channel: ch, Body: []byte(b)})
	}
	resp, err := c.SendQueueMessagesBatch(context.Background(), req)
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	if resp.HaveErrors {
		t.Fatalf("send: %v", resp.Results)
	}
}

// downstream is a raw QueuesDownstream stream whose every receive is
// bounded, so that a stuck stream fails the test instead of hanging it.
type downstream struct {
	t      testing.TB
	s      pb.Kubemq_QueuesDownstreamClient
	cancel context.CancelFunc
}

func openDownstream(t testing.TB, c pb.KubemqClient) *downstream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := c.QueuesDownstream(ctx)
	if err != nil {
		cancel()
		t.Fatalf("open downstream: %v", err)
	}
	t.Cleanup(cancel)
	return &downstream{t: t, s: s, cancel: cancel}
}

func (d *downstream) send(req *pb.QueuesDownstreamRequest) {
	d.t.Helper()
	if req.ClientID == "" {
		req.ClientID = "raw"
	}
	if err := d.s.Send(req); err != nil {
		d.t.Fatalf("downstream send: %v", err)
	}
}

func (d *downstream) recv() *pb.QueuesDownstreamResponse {
	d.t.Helper()
	type result struct {
		r   *pb.QueuesDownstreamResponse
		err error
	}
	ch := make(chan result, 1)
	go func() {
		r, err := d.s.Recv()
		ch <- result{r, err}
	}()
	select {
	case res := <-ch:
		if res.err != nil {
			d.t.Fatalf("downstream recv: %v", res.err)
		}
		return res.r
	case <-time.After(5 * time.Second):
		d.t.Fatalf("downstream: no response within 5 s")
		return nil
	}
}

func (d *downstream) get(ch string, max, waitMs int32) *pb.QueuesDownstreamResponse {
	d.t.Helper()
	d.send(&pb.QueuesDownstreamRequest{RequestID: "get", RequestTypeData: pb.QueuesDownstreamRequestType_Get,
		Channel: ch, MaxItems: max, WaitTimeout: waitMs})
	return d.recv()
}

func wantError(t *testing.T, r *pb.QueuesDownstreamResponse, substr string) {
	t.Helper()
	if !r.IsError || !strings.Contains(r.Error, substr) {
		t.Errorf("response %v: want an error containing %q", r, substr)
	}
}

func TestQueueRawDownstreamRequests(t *testing.T) {
	t.Parallel()
	srv := brokertest.NewServer(t, fastOpts)
	c := rawClient(t, srv.Addr)
	d := openDownstream(t, c)
	const ch = "raw.q"
	rawSend(t, c, ch, "a", "b", "c")

	wantError(t, d.get("", 1, 0), "Error 120")
	wantError(t, d.get("bad name", 1, 0), "Error 120")
	wantError(t, d.get(ch, -1, 0), "max items")
	d.send(&pb.QueuesDownstreamRequest{RequestID: "x", ClientID: "", RequestTypeData: pb.QueuesDownstreamRequestType_Get, Channel: ch})
	// send fills an empty ClientID; ask with none directly:
	if err := d.s.Send(&pb.QueuesDownstreamRequest{RequestID: "noclient", RequestTypeData: pb.QueuesDownstreamRequestType_Get, Channel: ch}); err != nil {
		t.Fatal(err)
	}
	// The first of those two got messages (all three: MaxItems 0 means all).
	first := d.recv()
	if first.IsError || len(first.Messages) != 3 {
		t.Fatalf("MaxItems 0 poll = %v, want the 3 messages", first)
	}
	wantError(t, d.recv(), "Error 101")

	tx := first.TransactionId
	settle := func(typ pb.QueuesDownstreamRequestType, txID string, seqs ...int64) {
		d.send(&pb.QueuesDownstreamRequest{RequestID: "s", RequestTypeData: typ, RefTransactionId: txID, SequenceRange: seqs})
	}
	settle(pb.QueuesDownstreamRequestType_AckAll, "no-such-transaction")
	wantError(t, d.recv(), "transaction id not found")
	settle(pb.QueuesDownstreamRequestType(99), tx)
	wantError(t, d.recv(), "request unknown")
	settle(pb.QueuesDownstreamRequestType_CloseByServer, tx)
	wantError(t, d.recv(), "request unknown")

	settle(pb.QueuesDownstreamRequestType_ActiveOffsets, tx)
	offs := d.recv()
	if offs.IsError || len(offs.ActiveOffsets) != 3 {
		t.Fatalf("active offsets = %v", offs)
	}
	settle(pb.QueuesDownstreamRequestType_AckRange, tx)
	wantError(t, d.recv(), "empty list")
	settle(pb.QueuesDownstreamRequestType_AckRange, tx, offs.ActiveOffsets[0], 12345)
	wantError(t, d.recv(), "invalid ack sequence id 12345")
	d.send(&pb.QueuesDownstreamRequest{RequestID: "rq", RequestTypeData: pb.QueuesDownstreamRequestType_ReQueueAll, RefTransactionId: tx})
	wantError(t, d.recv(), "requeue")
	if got := srv.InFlight(ch); got != 2 {
		t.Errorf("in flight after acking one = %d, want 2", got)
	}
	settle(pb.QueuesDownstreamRequestType_NAckRange, tx, offs.ActiveOffsets[1])
	settle(pb.QueuesDownstreamRequestType_CloseByClient, tx)
	done := d.recv()
	if !done.TransactionComplete || done.TransactionId != tx {
		t.Fatalf("close by client = %v, want TransactionComplete", done)
	}
	settle(pb.QueuesDownstreamRequestType_AckAll, tx)
	wantError(t, d.recv(), "transaction is completed")

	// c (closed) is back at the head with its count undone; b (nacked) at
	// the tail with count 1.
	q := srv.Queue(ch)
	if len(q) != 2 || string(q[0].Body) != "c" || string(q[1].Body) != "b" {
		t.Fatalf("queue after settlements = %v", q)
	}
	if q[0].Attributes.ReceiveCount != 0 || q[1].Attributes.ReceiveCount != 1 {
		t.Errorf("receive counts = %d, %d; want 0, 1", q[0].Attributes.ReceiveCount, q[1].Attributes.ReceiveCount)
	}
	if srv.InFlight(ch) != 0 {
		t.Errorf("in flight = %d, want 0", srv.InFlight(ch))
	}

	// Huge MaxItems is capped, not allocated; the poll returns at its wait.
	r := d.get(ch, 1<<31-1, 0)
	if r.IsError || len(r.Messages) != 2 {
		t.Fatalf("huge MaxItems poll = %v", r)
	}
	settle(pb.QueuesDownstreamRequestType_AckAll, r.TransactionId)
	if !d.recv().TransactionComplete {
		t.Errorf("ack all did not complete the transaction")
	}
	// AutoAck consumes without a transaction.
	rawSend(t, c, ch, "auto")
	d.send(&pb.QueuesDownstreamRequest{RequestID: "auto", RequestTypeData: pb.QueuesDownstreamRequestType_Get, Channel: ch, MaxItems: 1, AutoAck: true})
	if r := d.recv(); len(r.Messages) != 1 || srv.InFlight(ch) != 0 || len(srv.Queue(ch)) != 0 {
		t.Errorf("auto ack poll = %v; in flight %d", r, srv.InFlight(ch))
	}
}

func TestQueueRawUpstreamAndLegacy(t *testing.T) {
	t.Parallel()
	srv := brokertest.NewServer(t, fastOpts)
	c := rawClient(t, srv.Addr)
	ctx := context.Background()

	up, err := c.QueuesUpstream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := up.Send(&pb.QueuesUpstreamRequest{RequestID: "empty"}); err != nil {
		t.Fatal(err)
	}
	if r, err := up.Recv(); err != nil || !r.IsError || r.RefRequestID != "empty" {
		t.Errorf("empty upstream request: %v %v", r, err)
	}
	if err := up.Send(&pb.QueuesUpstreamRequest{RequestID: "mixed", Messages: []*pb.QueueMessage{
		{ClientID: "c", Channel: "ok.q", Body: []byte("x")},
		{ClientID: "c", Channel: "", Body: []byte("x")},
		{ClientID: "c", Channel: "ok.q"},
		{ClientID: "", Channel: "ok.q", Body: []byte("x")},
		{ClientID: "c", Channel: "ok.q", Body: []byte("x"), Policy: &pb.QueueMessagePolicy{DelaySeconds: -1}},
		{ClientID: "c", Channel: "ok.q", Body: []byte("x"), Policy: &pb.QueueMessagePolicy{MaxReceiveCount: 5000}},
		{ClientID: "c", Channel: "ok.q", Body: []byte("x"), Policy: &pb.QueueMessagePolicy{ExpirationSeconds: 1 << 30}},
		{ClientID: "c", Channel: "ok.q", Body: []byte("x"), Policy: &pb.QueueMessagePolicy{MaxReceiveQueue: "bad*"}},
	}}); err != nil {
		t.Fatal(err)
	}
	r, err := up.Recv()
	if err != nil || len(r.Results) != 8 {
		t.Fatalf("mixed batch: %v %v", r, err)
	}
	wantErr := []string{"", "Error 120", "Error 110", "Error 101", "Error 135", "Error 134", "Error 133", "Error 120"}
	for i, w := range wantErr {
		if got := r.Results[i].Error; (w == "") != !r.Results[i].IsError || !strings.Contains(got, w) {
			t.Errorf("result %d = %v, want error %q", i, r.Results[i], w)
		}
	}
	if n := len(srv.Queue("ok.q")); n != 1 {
		t.Errorf("ok.q holds %d messages, want 1", n)
	}

	if _, err := c.SendQueueMessagesBatch(ctx, &pb.QueueMessagesBatchRequest{}); status.Code(err) != codes.Unknown {
		t.Errorf("empty batch: %v, want Unknown (as KubeMQ)", err)
	}
	for _, req := range []*pb.ReceiveQueueMessagesRequest{
		{ClientID: "c", Channel: "ok.q", MaxNumberOfMessages: 0},
		{ClientID: "c", Channel: "ok.q", MaxNumberOfMessages: 2000},
		{ClientID: "c", Channel: "ok.q", MaxNumberOfMessages: 1, WaitTimeSeconds: -1},
		{ClientID: "c", Channel: "ok.q", MaxNumberOfMessages: 1, WaitTimeSeconds: 4000},
		{ClientID: "", Channel: "ok.q", MaxNumberOfMessages: 1},
		{ClientID: "c", Channel: "", MaxNumberOfMessages: 1},
	} {
		if resp, err := c.ReceiveQueueMessages(ctx, req); err != nil || !resp.IsError {
			t.Errorf("receive %v: %v %v; want a response error", req, resp, err)
		}
	}
	for _, req := range []*pb.AckAllQueueMessagesRequest{
		{ClientID: "", Channel: "ok.q"}, {ClientID: "c", Channel: "a b"}, {ClientID: "c", Channel: "ok.q", WaitTimeSeconds: -3},
	} {
		if resp, err := c.AckAllQueueMessages(ctx, req); err != nil || !resp.IsError {
			t.Errorf("ack all %v: %v %v; want a response error", req, resp, err)
		}
	}
	// Ack-all purges and blocks for its wait (here 1 "second" of 10 ms,
	// raised to the 50 ms floor).
	start := time.Now()
	resp, err := c.AckAllQueueMessages(ctx, &pb.AckAllQueueMessagesRequest{ClientID: "c", Channel: "ok.q", WaitTimeSeconds: 1})
	if err != nil || resp.AffectedMessages != 1 || time.Since(start) < 45*time.Millisecond {
		t.Errorf("ack all: %v %v after %v", resp, err, time.Since(start))
	}
	if _, err := c.StreamQueueMessage(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := c.QueuesInfo(ctx, &pb.QueuesInfoRequest{RequestID: "i", QueueName: "ok.q;nothing"})
	if err != nil || info.RefRequestID != "i" || info.Info.TotalQueue != 1 || info.Info.Queues[0].Sent != 1 {
		t.Errorf("queues info: %v %v", info, err)
	}
}

func TestQueueTooManyPollsOnOneStream(t *testing.T) {
	t.Parallel()
	srv := brokertest.NewServer(t, fastOpts)
	d := openDownstream(t, rawClient(t, srv.Addr))
	for range 40 {
		d.send(&pb.QueuesDownstreamRequest{RequestID: "g", RequestTypeData: pb.QueuesDownstreamRequestType_Get,
			Channel: "idle.q", MaxItems: 1, WaitTimeout: 60000})
	}
	wantError(t, d.recv(), "too many polls")
}

func TestQueueDefaultMaxReceiveCount(t *testing.T) {
	t.Parallel()
	opts := fastOpts
	opts.DefaultMaxReceiveCount = 3
	srv := brokertest.NewServer(t, opts)
	c := rawClient(t, srv.Addr)
	d := openDownstream(t, c)
	rawSend(t, c, "dflt.q", "x")
	for i := 1; i <= 3; i++ {
		r := d.get("dflt.q", 1, 1000)
		if len(r.Messages) != 1 || r.Messages[0].Attributes.ReceiveCount != int32(i) {
			t.Fatalf("delivery %d = %v", i, r)
		}
		d.send(&pb.QueuesDownstreamRequest{RequestID: "n", RequestTypeData: pb.QueuesDownstreamRequestType_NAckAll, RefTransactionId: r.TransactionId})
		if !d.recv().TransactionComplete {
			t.Fatalf("nack all did not complete")
		}
	}
	if st := srv.QueueState("dflt.q"); len(st.Waiting) != 0 || st.InFlight != 0 {
		t.Errorf("after 3 NAcks with default max 3: %+v, want it dropped", st)
	}
}

func TestQueueDelayedSnapshot(t *testing.T) {
	t.Parallel()
	srv := brokertest.NewServer(t, fastOpts) // a "second" is 10 ms
	c := rawClient(t, srv.Addr)
	res, err := c.SendQueueMessage(context.Background(), &pb.QueueMessage{ClientID: "c", Channel: "delay.q", Body: []byte("d"),
		Policy: &pb.QueueMessagePolicy{DelaySeconds: 5}})
	if err != nil || res.IsError || res.DelayedTo == 0 {
		t.Fatalf("send delayed: %v %v", res, err)
	}
	st := srv.QueueState("delay.q")
	if len(st.Delayed) != 1 || len(st.Waiting) != 0 {
		t.Fatalf("right after send: %+v", st)
	}
	waitFor(t, 2*time.Second, "the delayed message to become ready", func() bool { return len(srv.Queue("delay.q")) == 1 })
}

func TestQueueServerRefusesOversized(t *testing.T) {
	t.Parallel()
	opts := fastOpts
	opts.MaxMessageBytes = 1 << 20
	srv := brokertest.NewServer(t, opts)
	host, port := srv.HostPort()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lc, err := kubemq.NewQueuesClient(ctx, kubemq.WithAddress(host, port), kubemq.WithClientId("c"),
		kubemq.WithTransportType(kubemq.TransportTypeGRPC))
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	_, err = lc.Send(ctx, kubemq.NewQueueMessage().SetChannel("big.q").SetBody(make([]byte, 2<<20)))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("2 MiB over a 1 MiB limit: %v, want ResourceExhausted", err)
	}
}

func TestQueueStopRestartKeepsState(t *testing.T) {
	t.Parallel()
	srv := brokertest.NewServer(t, fastOpts)
	c := rawClient(t, srv.Addr)
	rawSend(t, c, "keep.q", "m0", "m1", "m2")
	d := openDownstream(t, c)
	if r := d.get("keep.q", 1, 1000); len(r.Messages) != 1 {
		t.Fatalf("poll = %v", r)
	}
	if srv.InFlight("keep.q") != 1 {
		t.Fatalf("in flight = %d, want 1", srv.InFlight("keep.q"))
	}
	srv.Stop()
	if _, err := d.s.Recv(); err == nil {
		t.Fatalf("stream survived Stop")
	}
	if _, err := rawClient(t, srv.Addr).QueuesInfo(context.Background(), &pb.QueuesInfoRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("call while stopped: %v, want Unavailable", err)
	}
	srv.Restart()
	q := srv.Queue("keep.q")
	if len(q) != 3 || string(q[0].Body) != "m0" || q[0].Attributes.ReceiveCount != 0 || srv.InFlight("keep.q") != 0 {
		t.Fatalf("after restart: %v (in flight %d); want m0 back first, uncounted", q, srv.InFlight("keep.q"))
	}
	c2 := rawClient(t, srv.Addr)
	d2 := openDownstream(t, c2)
	if r := d2.get("keep.q", 3, 1000); len(r.Messages) != 3 || r.Messages[0].Attributes.ReceiveCount != 1 {
		t.Fatalf("poll after restart = %v", r)
	}
}

// brokerGoroutines returns the ids of goroutines running code of package
// broker (not its tests).
func brokerGoroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	re := regexp.MustCompile(`^goroutine (\d+) `)
	for _, g := range strings.Split(string(buf), "\n\n") {
		m := re.FindStringSubmatch(g)
		if m == nil || strings.Contains(g, "broker_test.") || strings.Contains(g, "brokertest.") {
			continue
		}
		if strings.Contains(g, "github.com/inferq/inferq/broker.") {
			out[m[1]] = g
		}
	}
	return out
}

// checkNoBrokerLeak fails t if goroutines of package broker started after
// before are still there shortly after the server closed.
func checkNoBrokerLeak(t *testing.T, before map[string]string) {
	t.Helper()
	var left map[string]string
	deadline := time.Now().Add(3 * time.Second)
	for {
		left = map[string]string{}
		for id, g := range brokerGoroutines() {
			if _, old := before[id]; !old {
				left[id] = g
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, g := range left {
		t.Errorf("goroutine left after Close:\n%s", g)
	}
}

// TestQueueCloseLeavesNoGoroutines drives every blocking path (waiting
// polls, held transactions, legacy receive and peek, ack-all, delay timers)
// and checks that Close ends them all. Not parallel: it counts goroutines.
func TestQueueCloseLeavesNoGoroutines(t *testing.T) {
	before := brokerGoroutines()
	srv := broker.New(fastOpts)
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	c := rawClient(t, srv.Addr())
	rawSend(t, c, "leak.q", "a", "b")
	if _, err := c.SendQueueMessage(context.Background(), &pb.QueueMessage{ClientID: "c", Channel: "leak.q", Body: []byte("later"),
		Policy: &pb.QueueMessagePolicy{DelaySeconds: 3600}}); err != nil {
		t.Fatal(err)
	}
	d := openDownstream(t, c)
	if r := d.get("leak.q", 1, 0); len(r.Messages) != 1 {
		t.Fatalf("poll = %v", r)
	}
	d.send(&pb.QueuesDownstreamRequest{RequestID: "wait", RequestTypeData: pb.QueuesDownstreamRequestType_Get, Channel: "idle.q", MaxItems: 5, WaitTimeout: 600000})
	ctx := context.Background()
	errs := make(chan error, 3)
	go func() {
		_, err := c.ReceiveQueueMessages(ctx, &pb.ReceiveQueueMessagesRequest{ClientID: "c", Channel: "idle.q", MaxNumberOfMessages: 3, WaitTimeSeconds: 3600})
		errs <- err
	}()
	go func() {
		_, err := c.ReceiveQueueMessages(ctx, &pb.ReceiveQueueMessagesRequest{ClientID: "c", Channel: "idle.q", MaxNumberOfMessages: 3, WaitTimeSeconds: 3600, IsPeak: true})
		errs <- err
	}()
	go func() {
		_, err := c.AckAllQueueMessages(ctx, &pb.AckAllQueueMessagesRequest{ClientID: "c", Channel: "idle2.q", WaitTimeSeconds: 3600})
		errs <- err
	}()
	waitFor(t, 2*time.Second, "the waits to start", func() bool {
		return srv.QueueSnapshot("idle.q").InFlight == 0 && len(brokerGoroutines()) > 0
	})
	time.Sleep(50 * time.Millisecond) // let the unary calls reach their waits
	start := time.Now()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Close took %v", took)
	}
	for range 3 {
		select {
		case err := <-errs:
			if err == nil {
				t.Errorf("a waiting call returned no error after Close")
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("a waiting call did not return after Close")
		}
	}
	if st := srv.QueueSnapshot("leak.q"); len(st.Waiting) != 2 || st.InFlight != 0 || len(st.Delayed) != 1 {
		t.Errorf("after Close: %+v; want the held message back", st)
	}
	checkNoBrokerLeak(t, before)
	if err := srv.Start("127.0.0.1:0"); err != broker.ErrClosed {
		t.Errorf("Start after Close: %v, want ErrClosed", err)
	}
}

func ExampleServer_QueueSnapshot() {
	srv := broker.New(broker.Options{})
	defer srv.Close()
	_, _ = srv.SendQueueMessage(context.Background(), &pb.QueueMessage{ClientID: "c", Channel: "tasks", Body: []byte("job")})
	st := srv.QueueSnapshot("tasks")
	fmt.Println(len(st.Waiting), string(st.Waiting[0].Body), st.InFlight)
	// Output: 1 job 0
}

// TestQueueStrandingFollowsOpenBatches covers what the conformance row
// cannot show in a single batch (trap 13): the final settlement of a batch
// frees room just before it closes, and what the broker pushes there moves
// to another open batch of the queue and waits for it to complete, taking
// the room that batch's settlements free; closing the stream gives
// everything back uncounted.
func TestQueueStrandingFollowsOpenBatches(t *testing.T) {
	t.Parallel()
	srv := brokertest.NewServer(t, fastOpts)
	c := rawClient(t, srv.Addr)
	d := openDownstream(t, c)
	const ch = "strand.q"
	rawSend(t, c, ch, "m0", "m1", "m2", "m3", "m4")
	body := func(msgs []*pb.QueueMessage) []string {
		var out []string
		for _, m := range msgs {
			out = append(out, string(m.Body))
		}
		return out
	}
	waiting := func() []string { return body(srv.Queue(ch)) }
	settle := func(typ pb.QueuesDownstreamRequestType, tx string, seqs ...int64) {
		d.send(&pb.QueuesDownstreamRequest{RequestID: "s", RequestTypeData: typ, RefTransactionId: tx, SequenceRange: seqs})
	}

	a, b := d.get(ch, 1, 0), d.get(ch, 2, 0)
	if fmt.Sprint(body(a.Messages), body(b.Messages)) != "[m0] [m1 m2]" {
		t.Fatalf("polls = %v %v", body(a.Messages), body(b.Messages))
	}
	// a completes while b is open: m3 moves into b.
	settle(pb.QueuesDownstreamRequestType_AckAll, a.TransactionId)
	if r := d.recv(); !r.TransactionComplete {
		t.Fatalf("ack all of a = %v", r)
	}
	if got := waiting(); fmt.Sprint(got) != "[m4]" || srv.InFlight(ch) != 3 {
		t.Fatalf("after a completed: waiting %v, in flight %d; want [m4] and 3 (m1 m2 held, m3 stranded)", got, srv.InFlight(ch))
	}
	// The room a partial settlement of b frees is m3's already: m4 stays.
	settle(pb.QueuesDownstreamRequestType_AckRange, b.TransactionId, int64(b.Messages[0].Attributes.Sequence))
	settle(pb.QueuesDownstreamRequestType_ActiveOffsets, b.TransactionId)
	if r := d.recv(); len(r.ActiveOffsets) != 1 {
		t.Fatalf("active offsets of b = %v, want m2's", r.ActiveOffsets)
	}
	if got := waiting(); fmt.Sprint(got) != "[m4]" || srv.InFlight(ch) != 2 {
		t.Fatalf("after b's partial ack: waiting %v, in flight %d; want [m4] and 2 (m2 held, m3 stranded)", got, srv.InFlight(ch))
	}
	// Closing the stream gives back m2 first, then what b stranded, none
	// counted as a receive.
	d.cancel()
	waitFor(t, 2*time.Second, "messages back", func() bool { return len(waiting()) == 3 })
	// m2 held and m3 stranded come back at the head, m4 after them.
	q := srv.Queue(ch)
	if got := body(q); fmt.Sprint(got) != "[m2 m3 m4]" {
		t.Errorf("after the close: waiting %v, want [m2 m3 m4]", got)
	}
	for _, m := range q {
		if m.Attributes.ReceiveCount != 0 {
			t.Errorf("%s: ReceiveCount %d, want 0", m.Body, m.Attributes.ReceiveCount)
		}
	}
	if n := srv.InFlight(ch); n != 0 {
		t.Errorf("in flight = %d after the close, want 0", n)
	}
}

// A control character in a channel name is refused like white space on
// every path (doc.go): the real broker takes it and is damaged by it.
func TestControlCharactersInChannelNames(t *testing.T) {
	t.Parallel()
	srv := brokertest.NewServer(t, fastOpts)
	c := rawClient(t, srv.Addr)
	ctx := context.Background()
	for _, ch := range []string{"a\nb", "a\rb", "a\tb", "a\x00b", "a\x7fb", "ok.q\n"} {
		resp, err := c.SendQueueMessage(ctx, &pb.QueueMessage{ClientID: "c", Channel: ch, Body: []byte("x")})
		if err != nil || !resp.IsError || !strings.Contains(resp.Error, "Error 120") {
			t.Errorf("queue send to %q: %v %v, want Error 120", ch, resp, err)
		}
		policy := &pb.QueueMessagePolicy{MaxReceiveCount: 2, MaxReceiveQueue: ch}
		resp, err = c.SendQueueMessage(ctx, &pb.QueueMessage{ClientID: "c", Channel: "ok.q", Body: []byte("x"), Policy: policy})
		if err != nil || !resp.IsError || !strings.Contains(resp.Error, "Error 120") {
			t.Errorf("queue send with dead letter queue %q: %v %v, want Error 120", ch, resp, err)
		}
		recv, err := c.ReceiveQueueMessages(ctx, &pb.ReceiveQueueMessagesRequest{ClientID: "c", Channel: ch, MaxNumberOfMessages: 1})
		if err != nil || !recv.IsError || !strings.Contains(recv.Error, "Error 120") {
			t.Errorf("receive from %q: %v %v, want Error 120", ch, recv, err)
		}
		for _, store := range []bool{false, true} {
			_, err := c.SendEvent(ctx, &pb.Event{ClientID: "c", Channel: ch, Body: []byte("x"), Store: store})
			if !strings.Contains(status.Convert(err).Message(), "Error 108") {
				t.Errorf("event (store %v) to %q: %v, want Error 108", store, ch, err)
			}
		}
	}
	if n := len(srv.Queue("ok.q")); n != 0 {
		t.Errorf("ok.q holds %d messages, want none", n)
	}
}

// A peek beside an open batch strands what it saw in that batch (as on
// KubeMQ, strandPeekedLocked), even past the batch's size; a batch that
// completes beside it then moves nothing more there, and the stranded
// messages come back when it completes. Before, the completion sliced
// with a negative count and panicked.
func TestQueuePeekStrandsInAnOpenBatch(t *testing.T) {
	t.Parallel()
	srv := brokertest.NewServer(t, fastOpts)
	c := rawClient(t, srv.Addr)
	d := openDownstream(t, c)
	const ch = "peekstrand.q"
	rawSend(t, c, ch, "m0", "m1")
	a, b := d.get(ch, 1, 0), d.get(ch, 1, 0)
	rawSend(t, c, ch, "p0", "p1", "p2", "p3")
	res, err := c.ReceiveQueueMessages(context.Background(), &pb.ReceiveQueueMessagesRequest{ClientID: "raw", Channel: ch, MaxNumberOfMessages: 3, WaitTimeSeconds: 1, IsPeak: true})
	if err != nil || len(res.Messages) != 3 {
		t.Fatalf("peek = %v, %v", res, err)
	}
	if got := len(srv.Queue(ch)); got != 1 {
		t.Fatalf("%d waiting after the peek, want 1 (p3): the peeked three strand in the open batch", got)
	}
	d.send(&pb.QueuesDownstreamRequest{RequestID: "s", RequestTypeData: pb.QueuesDownstreamRequestType_AckAll, RefTransactionId: b.TransactionId})
	if r := d.recv(); !r.TransactionComplete {
		t.Fatalf("ack all of b = %v", r)
	}
	d.send(&pb.QueuesDownstreamRequest{RequestID: "s", RequestTypeData: pb.QueuesDownstreamRequestType_AckAll, RefTransactionId: a.TransactionId})
	if r := d.recv(); !r.TransactionComplete {
		t.Fatalf("ack all of a = %v", r)
	}
	waitFor(t, 2*time.Second, "the stranded back", func() bool { return len(srv.Queue(ch)) == 4 })
}
