package scaler_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/broker/brokertest"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/scaler"
	pb "github.com/inferq/inferq/scaler/externalscalerpb"
	kpb "github.com/kubemq-io/protobuf/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

var _ scaler.Broker = (*mq.Conn)(nil)

// embedded starts an embedded broker and a Conn to it.
func embedded(t *testing.T) (*brokertest.Server, *mq.Conn) {
	t.Helper()
	srv := brokertest.NewServer(t, broker.Options{})
	conn, err := mq.Dial(context.Background(), mq.Config{Address: srv.Addr, ClientID: "scaler-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return srv, conn
}

// send stores n messages on queue.
func send(t *testing.T, srv *brokertest.Server, queue string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		res, err := srv.Broker.SendQueueMessage(context.Background(), &kpb.QueueMessage{Channel: queue, ClientID: "producer", Body: []byte(`{"task_id":"t"}`)})
		if err != nil || res.IsError {
			t.Fatalf("send to %s: %v %s", queue, err, res.GetError())
		}
	}
}

// take consumes (auto-acks) n messages of queue.
func take(t *testing.T, srv *brokertest.Server, queue string, n int) {
	t.Helper()
	res, err := srv.Broker.ReceiveQueueMessages(context.Background(), &kpb.ReceiveQueueMessagesRequest{
		ClientID: "consumer", Channel: queue, MaxNumberOfMessages: int32(n), WaitTimeSeconds: 1})
	if err != nil || res.IsError || len(res.Messages) != n {
		t.Fatalf("receive %d from %s: %v %s, got %d", n, queue, err, res.GetError(), len(res.GetMessages()))
	}
}

// serve starts a Scaler on a loopback port and returns a client of it; the
// scaler stops when the test ends, and must stop cleanly.
func serve(t *testing.T, cfg scaler.Config) (pb.ExternalScalerClient, *grpc.ClientConn, context.CancelFunc) {
	t.Helper()
	s, err := scaler.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lis) }()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return pb.NewExternalScalerClient(cc), cc, stop
}

func ref(md map[string]string) *pb.ScaledObjectRef {
	return &pb.ScaledObjectRef{Name: "inferq", Namespace: "inferq", ScalerMetadata: md}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// The acceptance line: false on an empty queue, true with one task
// waiting, GetMetrics the depth, false again once the tasks are taken; on
// the embedded broker always, and on a real KubeMQ at KUBEMQ_ADDRESS when
// it is set. It sends and takes through mq, as producers and inferq do.
func TestAcceptance(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		_, conn := embedded(t)
		acceptance(t, conn)
	})
	t.Run("kubemq", func(t *testing.T) {
		addr := os.Getenv("KUBEMQ_ADDRESS")
		if addr == "" {
			t.Skip("KUBEMQ_ADDRESS is not set: no real KubeMQ to test against")
		}
		conn, err := mq.Dial(context.Background(), mq.Config{Address: addr, ClientID: "scaler-test"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		acceptance(t, conn)
	})
}

func acceptance(t *testing.T, conn *mq.Conn) {
	c, _, _ := serve(t, scaler.Config{Broker: conn})
	ctx := ctxT(t)
	// A fresh name: a real broker keeps channels for a day.
	q := fmt.Sprintf("inferq-scaler-test-%d", time.Now().UnixNano())
	r := ref(map[string]string{"scalerAddress": "inferq-scaler.inferq:6000", "queue": q, "targetDepth": "10"})
	isActive := func() bool {
		t.Helper()
		got, err := c.IsActive(ctx, r)
		if err != nil {
			t.Fatalf("IsActive: %v", err)
		}
		return got.Result
	}
	depth := func() int64 {
		t.Helper()
		got, err := c.GetMetrics(ctx, &pb.GetMetricsRequest{ScaledObjectRef: r, MetricName: scaler.MetricName})
		if err != nil {
			t.Fatalf("GetMetrics: %v", err)
		}
		return got.MetricValues[0].MetricValue
	}
	put := func(channel string, n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			if err := conn.Sender().Send(ctx, mq.OutMessage{Channel: channel, Body: []byte(`{"task_id":"t"}`)}); err != nil {
				t.Fatalf("send to %s: %v", channel, err)
			}
		}
	}
	if isActive() {
		t.Fatal("IsActive = true on an empty queue, want false")
	}
	if d := depth(); d != 0 {
		t.Errorf("depth of an empty queue = %d, want 0", d)
	}
	put(q+"-other", 5) // another queue does not count
	put(q, 1)
	// The real broker's counter may trail a send by a moment.
	waitFor(t, "IsActive true with one task waiting", isActive)
	if d := depth(); d != 1 {
		t.Errorf("depth with one task waiting = %d, want 1", d)
	}
	put(q, 4)
	waitFor(t, "GetMetrics 5 with five tasks waiting", func() bool { return depth() == 5 })
	for _, ch := range []string{q, q + "-other"} { // leave nothing behind
		for i := 0; i < 5; i++ {
			if ok, err := conn.ReceiveOne(ctx, ch, time.Second); err != nil || !ok {
				t.Fatalf("take task %d of %s: %v, %v", i, ch, ok, err)
			}
		}
	}
	waitFor(t, "IsActive false once the tasks are taken", func() bool { return !isActive() })
	if d := depth(); d != 0 {
		t.Errorf("depth after the tasks were taken = %d, want 0", d)
	}

	// A name the real broker reports trimmed (mq.InfoName).
	qt := fmt.Sprintf("inferq-scaler-trim-%d.EU", time.Now().UnixNano())
	r = ref(map[string]string{"queue": qt, "targetDepth": "10"})
	put(qt, 2)
	waitFor(t, "GetMetrics 2 on "+qt, func() bool { return depth() == 2 })
	for i := 0; i < 2; i++ {
		if ok, err := conn.ReceiveOne(ctx, qt, time.Second); err != nil || !ok {
			t.Fatalf("take task %d of %s: %v, %v", i, qt, ok, err)
		}
	}
}

func TestGetMetricsIsTheDepth(t *testing.T) {
	srv, conn := embedded(t)
	c, _, _ := serve(t, scaler.Config{Broker: conn})
	ctx := ctxT(t)
	send(t, srv, "q.a", 7)
	send(t, srv, "q.b", 4)
	for _, tt := range []struct {
		queue string
		want  int64
	}{
		{"q.a", 7}, {"q.b", 4}, {"q.a,q.b", 11}, {"q.a, q.b, q.a", 11}, {"q.a,q.none", 7}, {"q.none", 0},
	} {
		res, err := c.GetMetrics(ctx, &pb.GetMetricsRequest{
			ScaledObjectRef: ref(map[string]string{"queue": tt.queue, "targetDepth": "5"}), MetricName: scaler.MetricName})
		if err != nil {
			t.Fatalf("%s: %v", tt.queue, err)
		}
		if len(res.MetricValues) != 1 {
			t.Fatalf("%s: %d metric values, want 1", tt.queue, len(res.MetricValues))
		}
		v := res.MetricValues[0]
		if v.MetricName != scaler.MetricName || v.MetricValue != tt.want || v.MetricValueFloat != float64(tt.want) {
			t.Errorf("%s: got %s = %d (float %v), want %s = %d", tt.queue, v.MetricName, v.MetricValue, v.MetricValueFloat, scaler.MetricName, tt.want)
		}
	}
}

func TestActivationDepth(t *testing.T) {
	srv, conn := embedded(t)
	c, _, _ := serve(t, scaler.Config{Broker: conn})
	ctx := ctxT(t)
	r := ref(map[string]string{"queue": "q", "targetDepth": "5", "activationDepth": "2"})
	for _, want := range []bool{false, false, false, true} {
		got, err := c.IsActive(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if got.Result != want {
			d := srv.Broker.QueueSnapshot("q")
			t.Fatalf("depth %d, activationDepth 2: IsActive = %v, want %v", len(d.Waiting), got.Result, want)
		}
		send(t, srv, "q", 1)
	}
}

func TestGetMetricSpec(t *testing.T) {
	_, conn := embedded(t)
	c, _, _ := serve(t, scaler.Config{Broker: conn})
	res, err := c.GetMetricSpec(ctxT(t), ref(map[string]string{"queue": "q", "targetDepth": "256"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.MetricSpecs) != 1 {
		t.Fatalf("%d specs, want 1", len(res.MetricSpecs))
	}
	s := res.MetricSpecs[0]
	if s.MetricName != scaler.MetricName || s.TargetSize != 256 || s.TargetSizeFloat != 256 {
		t.Errorf("spec = %v, want %s target 256", s, scaler.MetricName)
	}
}

// Bad metadata is InvalidArgument naming the field, from every RPC.
func TestBadMetadataIsInvalidArgument(t *testing.T) {
	_, conn := embedded(t)
	c, _, _ := serve(t, scaler.Config{Broker: conn})
	ctx := ctxT(t)
	for _, tt := range []struct {
		md    map[string]string
		field string
	}{
		{nil, "scalerMetadata.queue: is missing"},
		{map[string]string{"targetDepth": "5"}, "scalerMetadata.queue: is missing"},
		{map[string]string{"queue": "q"}, "scalerMetadata.targetDepth: is missing"},
		{map[string]string{"queue": "q", "targetDepth": "ten"}, `scalerMetadata.targetDepth: is "ten"`},
		{map[string]string{"queue": "q", "targetDepth": "0"}, `scalerMetadata.targetDepth: is "0"; want a whole number >= 1`},
		{map[string]string{"queue": "q", "targetDepth": "5", "activationDepth": "-1"}, "scalerMetadata.activationDepth"},
		{map[string]string{"queue": "a b", "targetDepth": "5"}, "scalerMetadata.queue"},
		{map[string]string{"queue": "a;b", "targetDepth": "5"}, "scalerMetadata.queue"},
		{map[string]string{"queue": "a,,b", "targetDepth": "5"}, "scalerMetadata.queue"},
	} {
		r := ref(tt.md)
		check := func(rpc string, err error) {
			t.Helper()
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tt.field) || !strings.Contains(st.Message(), "inferq/inferq") {
				t.Errorf("%s(%v): %v, want InvalidArgument naming the ScaledObject and %q", rpc, tt.md, err, tt.field)
			}
		}
		_, err := c.IsActive(ctx, r)
		check("IsActive", err)
		_, err = c.GetMetrics(ctx, &pb.GetMetricsRequest{ScaledObjectRef: r, MetricName: scaler.MetricName})
		check("GetMetrics", err)
		_, err = c.GetMetricSpec(ctx, r)
		check("GetMetricSpec", err)
		stream, err := c.StreamIsActive(ctx, r)
		if err == nil {
			_, err = stream.Recv()
		}
		check("StreamIsActive", err)
	}
	_, err := c.GetMetrics(ctx, &pb.GetMetricsRequest{MetricName: scaler.MetricName})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("GetMetrics without scaledObjectRef: %v, want InvalidArgument", err)
	}
}

// StreamIsActive sends the state at once, a change when a task arrives,
// and its handler ends when the client cancels.
func TestStreamIsActive(t *testing.T) {
	srv, conn := embedded(t)
	c, _, _ := serve(t, scaler.Config{Broker: conn, PollInterval: 100 * time.Millisecond})
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	stream, err := c.StreamIsActive(ctx, ref(map[string]string{"queue": "q", "targetDepth": "5"}))
	if err != nil {
		t.Fatal(err)
	}
	recv := func(want bool) {
		t.Helper()
		got, err := stream.Recv()
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		if got.Result != want {
			t.Fatalf("Recv = %v, want %v", got.Result, want)
		}
	}
	recv(false)
	if n := streamHandlers(); n != 1 {
		t.Fatalf("%d StreamIsActive handlers running, want 1", n)
	}
	send(t, srv, "q", 1)
	recv(true)
	take(t, srv, "q", 1)
	recv(false)
	cancel()
	if _, err := stream.Recv(); status.Code(err) != codes.Canceled {
		t.Errorf("Recv after cancel: %v, want Canceled", err)
	}
	waitFor(t, "the StreamIsActive handler to return after the client cancelled", func() bool { return streamHandlers() == 0 })
}

// Stopping Serve ends open streams cleanly (EOF, which KEDA takes as a
// reason to reconnect at once), within StopGrace's wait.
func TestServeStopEndsStreams(t *testing.T) {
	_, conn := embedded(t)
	c, _, stop := serve(t, scaler.Config{Broker: conn, StopGrace: time.Minute})
	stream, err := c.StreamIsActive(ctxT(t), ref(map[string]string{"queue": "q", "targetDepth": "5"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	stop()
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("Recv after the scaler stopped: %v, want EOF", err)
	}
}

// flaky is a Broker that fails while down is set, and reports depth for
// queue "q".
type flaky struct {
	mu    sync.Mutex
	down  bool
	depth int64
	calls int
}

func (f *flaky) QueuesInfo(_ context.Context, _ string) (map[string]mq.QueueInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.down {
		return nil, mq.ErrUnavailable
	}
	return map[string]mq.QueueInfo{"q": {Name: "q", Waiting: f.depth}}, nil
}

func (f *flaky) set(down bool, depth int64) {
	f.mu.Lock()
	f.down, f.depth = down, depth
	f.mu.Unlock()
}

func (f *flaky) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// A broker that fails for a while does not end the stream; the change made
// meanwhile is sent once the broker answers. Unary calls meanwhile are
// Unavailable.
func TestStreamSurvivesBrokerOutage(t *testing.T) {
	b := &flaky{}
	c, _, _ := serve(t, scaler.Config{Broker: b, PollInterval: 100 * time.Millisecond})
	ctx := ctxT(t)
	r := ref(map[string]string{"queue": "q", "targetDepth": "5"})
	stream, err := c.StreamIsActive(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := stream.Recv(); err != nil || got.Result {
		t.Fatalf("first Recv = %v, %v; want false", got, err)
	}
	b.set(true, 3)
	if _, err := c.IsActive(ctx, r); status.Code(err) != codes.Unavailable {
		t.Errorf("IsActive with the broker down: %v, want Unavailable", err)
	}
	n := b.callCount()
	waitFor(t, "the stream to poll the broker while it is down", func() bool { return b.callCount() >= n+3 })
	b.set(false, 3)
	if got, err := stream.Recv(); err != nil || !got.Result {
		t.Fatalf("Recv after the outage = %v, %v; want true", got, err)
	}
}

// realNames is a Broker that names and filters queues as the real KubeMQ
// does: trimmed of the characters of "_QUEUES." (mq.InfoName).
type realNames map[string]int64

func (r realNames) QueuesInfo(_ context.Context, filter string) (map[string]mq.QueueInfo, error) {
	out := map[string]mq.QueueInfo{}
	for _, f := range strings.Split(filter, ";") {
		for name, w := range r {
			if n := mq.InfoName(name); n == f {
				out[n] = mq.QueueInfo{Name: n, Waiting: w}
			}
		}
	}
	return out, nil
}

func TestDepthUnderTheRealBrokersNames(t *testing.T) {
	c, _, _ := serve(t, scaler.Config{Broker: realNames{"tasks.EU": 5, "QS.jobs": 2}})
	res, err := c.GetMetrics(ctxT(t), &pb.GetMetricsRequest{
		ScaledObjectRef: ref(map[string]string{"queue": "tasks.EU,QS.jobs", "targetDepth": "1"})})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.MetricValues[0].MetricValue; got != 7 {
		t.Errorf("depth = %d, want 7 (5 on tasks.EU reported as %q, 2 on QS.jobs as %q)", got, mq.InfoName("tasks.EU"), mq.InfoName("QS.jobs"))
	}
}

func TestHealth(t *testing.T) {
	_, cc, _ := serve(t, scaler.Config{Broker: realNames{}})
	h := healthpb.NewHealthClient(cc)
	for _, svc := range []string{"", "externalscaler.ExternalScaler"} {
		res, err := h.Check(ctxT(t), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || res.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q = %v, %v; want SERVING", svc, res, err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tt := range []struct {
		cfg  scaler.Config
		want string
	}{
		{scaler.Config{}, "Broker is nil"},
		{scaler.Config{Broker: realNames{}, PollInterval: time.Millisecond}, "PollInterval 1ms is outside"},
		{scaler.Config{Broker: realNames{}, PollInterval: time.Hour}, "PollInterval 1h0m0s is outside"},
		{scaler.Config{Broker: realNames{}, CallTimeout: -time.Second}, "CallTimeout"},
		{scaler.Config{Broker: realNames{}}, ""},
	} {
		_, err := scaler.New(tt.cfg)
		if (tt.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v, want %q", tt.cfg, err, tt.want)
		}
	}
}

// streamHandlers counts the goroutines running a StreamIsActive handler.
func streamHandlers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "scaler.(*Scaler).StreamIsActive(") {
			n++
		}
	}
	return n
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
