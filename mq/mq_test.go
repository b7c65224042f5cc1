package mq

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/broker/brokertest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// target is a broker to test against: the embedded one always, the real
// one at KUBEMQ_ADDRESS when set (restart is nil there).
type target struct {
	name string
	addr string
	srv  *brokertest.Server
}

func targets(t testing.TB, opts broker.Options) []target {
	t.Helper()
	srv := brokertest.NewServer(t, opts)
	out := []target{{name: "embedded", addr: srv.Addr, srv: srv}}
	if a := os.Getenv("KUBEMQ_ADDRESS"); a != "" {
		out = append(out, target{name: "kubemq", addr: a})
	}
	return out
}

func fastBroker() broker.Options { return broker.Options{PollWaitFloor: 50 * time.Millisecond} }

// dial connects to tg and closes the Conn (checking for leaked goroutines)
// when the test ends.
func dial(t testing.TB, tg target) *Conn {
	t.Helper()
	c, err := Dial(context.Background(), Config{
		Address: tg.addr, ClientID: "mqtest", RetryMin: 20 * time.Millisecond, RetryMax: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		checkNoLeaks(t)
	})
	return c
}

// chanName is unique per test run: the real broker is shared.
func chanName(t testing.TB) string {
	return fmt.Sprintf("mqtest.%s.%x", strings.ReplaceAll(t.Name(), "/", "."), rand.Uint32())
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkNoLeaks waits for the goroutines of this package and of the SDK to
// end.
func checkNoLeaks(t testing.TB) {
	t.Helper()
	var stacks string
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "kubemq-io/kubemq-go") ||
				(strings.Contains(g, "inferq/mq.") && !strings.Contains(g, "testing.tRunner") && !strings.Contains(g, "testing.(*B)") && !strings.Contains(g, "checkNoLeaks")) {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return
		}
		stacks = strings.Join(leaked, "\n\n")
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("goroutines left after Close:\n%s", stacks)
}

// runPoller runs a Poller until the test ends.
func runPoller(t testing.TB, c *Conn, cfg PollerConfig) *Poller {
	t.Helper()
	p, err := c.NewPoller(cfg)
	if err != nil {
		t.Fatal(err)
	}
	startPoller(t, p)
	return p
}

// startPoller runs p (made, and its test hooks set) until the test ends,
// or until the stop it returns is called: it waits for Run to return.
func startPoller(t testing.TB, p *Poller) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("poller run: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("poller did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// deliveredOnce fails t for every message of seen (body or id: times
// delivered) delivered more than once.
func deliveredOnce(t testing.TB, seen map[string]int) {
	t.Helper()
	for k, n := range seen {
		if n != 1 {
			t.Errorf("%s delivered %d times", k, n)
		}
	}
}

func sendN(t testing.TB, s *Sender, ch string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.Send(context.Background(), OutMessage{Channel: ch, Body: fmt.Appendf(nil, "m%d", i)})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("send: %v", err)
		}
	}
}

func TestSenderCoalescesConcurrentCalls(t *testing.T) {
	for _, tg := range targets(t, fastBroker()) {
		t.Run(tg.name, func(t *testing.T) {
			c := dial(t, tg)
			ch := chanName(t)
			s := c.Sender()
			waitFor(t, 5*time.Second, "sender warm", func() bool { return s.Send(context.Background(), OutMessage{Channel: ch, Body: []byte("w")}) == nil })
			calls0 := s.Calls()
			const callers, each = 64, 20
			var wg sync.WaitGroup
			for g := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range each {
						if err := s.Send(context.Background(), OutMessage{Channel: ch, Body: fmt.Appendf(nil, "%d-%d", g, i)}); err != nil {
							t.Errorf("send: %v", err)
							return
						}
					}
				}()
			}
			wg.Wait()
			calls := s.Calls() - calls0
			t.Logf("%d messages in %d stream sends", callers*each, calls)
			if calls >= callers*each/2 {
				t.Errorf("%d stream sends for %d messages: not coalesced", calls, callers*each)
			}
			infos, err := c.QueuesInfo(context.Background(), ch)
			if err != nil {
				t.Fatal(err)
			}
			if w := infos[ch].Waiting; w != callers*each+1 {
				t.Errorf("waiting %d, want %d", w, callers*each+1)
			}
		})
	}
}

func TestSenderErrors(t *testing.T) {
	tg := targets(t, fastBroker())[0]
	c, err := Dial(context.Background(), Config{Address: tg.addr, MaxMessageBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ch := chanName(t)
	if err := c.Sender().Send(context.Background(), OutMessage{Channel: ch, Body: make([]byte, 1001)}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized: %v", err)
	}
	err = c.Sender().Send(context.Background(), OutMessage{Channel: ch, Body: []byte("a")}, OutMessage{Channel: "bad channel*", Body: []byte("b")})
	var be *BatchError
	if !errors.As(err, &be) || be.Errs[0] != nil || be.Errs[1] == nil {
		t.Errorf("batch with one bad message: %v", err)
	}
	c.Close()
	if err := c.Sender().Send(context.Background(), OutMessage{Channel: ch, Body: []byte("a")}); !errors.Is(err, ErrClosed) {
		t.Errorf("send after close: %v", err)
	}
	checkNoLeaks(t)
}

// The broker's refusals of a channel name come back as ErrRefused on every
// path that names a channel, never as ErrUnavailable (nothing may retry
// them). A newline is tried on the embedded broker only: it damages a real
// one (KUBEMQ.md trap 19).
func TestRefusedChannelNames(t *testing.T) {
	for _, tg := range targets(t, fastBroker()) {
		t.Run(tg.name, func(t *testing.T) {
			c := dial(t, tg)
			ctx := context.Background()
			bad := []string{"a b", chanName(t) + ".*", chanName(t) + ".>", chanName(t) + "."}
			if tg.srv != nil {
				bad = append(bad, "a\nb", "a\rb", "a\x00b")
			}
			for _, ch := range bad {
				for op, call := range map[string]func() error{
					"queue send":   func() error { return c.Sender().Send(ctx, OutMessage{Channel: ch, Body: []byte("x")}) },
					"events store": func() error { return c.SendEventStore(ctx, ch, []byte("x"), nil) },
					"event":        func() error { return c.SendEvent(ctx, ch, []byte("x"), nil) },
					"receive one":  func() error { _, err := c.ReceiveOne(ctx, ch, time.Second); return err },
				} {
					err := call()
					if !errors.Is(err, ErrRefused) || errors.Is(err, ErrUnavailable) {
						t.Errorf("%s to %q: %v, want ErrRefused", op, ch, err)
					}
				}
			}
		})
	}
}

func TestRetryAndDeadLetter(t *testing.T) {
	tg := targets(t, broker.Options{PollWaitFloor: 50 * time.Millisecond, SecondLength: 100 * time.Millisecond})[0]
	c := dial(t, tg)
	ch, dlq := chanName(t), chanName(t)+".dlq"
	msgs := make(chan *Message, 10)
	deliver := func(ctx context.Context, batch []*Message) error {
		for _, m := range batch {
			msgs <- m
		}
		return nil
	}
	runPoller(t, c, PollerConfig{Channel: ch, Deliver: deliver})
	runPoller(t, c, PollerConfig{Channel: dlq, Deliver: deliver})
	if err := c.Sender().Send(context.Background(), OutMessage{Channel: ch, Body: []byte("t"), Tags: map[string]string{"task_id": "1"}, MaxReceiveCount: 3, MaxReceiveQueue: dlq}); err != nil {
		t.Fatal(err)
	}
	m := <-msgs
	start := time.Now()
	if err := c.Sender().SendRetry(context.Background(), m, time.Second, 2); err != nil {
		t.Fatal(err)
	}
	if m.Settled() {
		t.Error("SendRetry settled the original: that is its caller's")
	}
	if err := m.Ack(); err != nil {
		t.Fatal(err)
	}
	r := <-msgs
	t.Logf("retry delivered after %v (1 broker second = 100 ms here)", time.Since(start))
	if r.Tags[TagAttempt] != "2" || r.Tags["task_id"] != "1" || r.MaxReceiveQueue != dlq || r.ID == m.ID {
		t.Errorf("retry copy %+v", r)
	}
	if err := c.Sender().SendDeadLetter(context.Background(), r, dlq, "boom", 3); err != nil {
		t.Fatal(err)
	}
	if err := r.Ack(); err != nil {
		t.Fatal(err)
	}
	d := <-msgs
	if d.Channel != dlq || d.Tags[TagError] != "boom" || d.Tags[TagAttempts] != "3" || d.Tags[TagOrigin] != ch || d.Tags["task_id"] != "1" {
		t.Errorf("dead letter %+v", d)
	}
	_ = d.Ack()
	waitFor(t, 5*time.Second, "queue empty", func() bool {
		st := tg.srv.QueueState(ch)
		return len(st.Waiting) == 0 && st.InFlight == 0
	})
}

func TestUnary(t *testing.T) {
	for _, tg := range targets(t, fastBroker()) {
		t.Run(tg.name, func(t *testing.T) {
			c := dial(t, tg)
			ctx := context.Background()
			ch := chanName(t)
			if err := c.Ping(ctx); err != nil {
				t.Fatal(err)
			}
			sendN(t, c.Sender(), ch, 3)
			got, err := c.Peek(ctx, ch, 3, time.Second)
			if err != nil || len(got) != 3 {
				t.Fatalf("peek: %d, %v", len(got), err)
			}
			if err := got[0].Ack(); !errors.Is(err, ErrNotSettleable) {
				t.Errorf("ack of peeked: %v", err)
			}
			infos, err := c.QueuesInfo(ctx, ch)
			if err != nil || infos[ch].Waiting != 3 {
				t.Fatalf("info %+v %v", infos, err)
			}
			for i := range 3 {
				found, err := c.ReceiveOne(ctx, ch, time.Second)
				if err != nil || !found {
					t.Fatalf("receive %d: %v %v", i, found, err)
				}
			}
			start := time.Now()
			found, err := c.ReceiveOne(ctx, ch, time.Second)
			if err != nil || found {
				t.Fatalf("receive on empty: %v %v", found, err)
			}
			t.Logf("receive on an empty channel took %v", time.Since(start))
		})
	}
}

func TestUnaryBrokerAway(t *testing.T) {
	tg := targets(t, fastBroker())[0]
	c := dial(t, tg)
	tg.srv.Stop()
	if err := c.Ping(context.Background()); !errors.Is(err, ErrUnavailable) {
		t.Errorf("ping: %v", err)
	}
	tg.srv.Restart()
	waitFor(t, 10*time.Second, "ping", func() bool { return c.Ping(context.Background()) == nil })
}

func TestEventsStoreSendAndReplay(t *testing.T) {
	for _, tg := range targets(t, fastBroker()) {
		t.Run(tg.name, func(t *testing.T) {
			c := dial(t, tg)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ch := chanName(t)
			var wg sync.WaitGroup
			for i := range 10 {
				// Sequential sends keep the sequence order predictable.
				if err := c.SendEventStore(ctx, ch, fmt.Appendf(nil, "e%d", i), map[string]string{"i": fmt.Sprint(i)}); err != nil {
					t.Fatal(err)
				}
			}
			for range 50 { // concurrent ones pipeline on the one stream
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := c.SendEventStore(ctx, ch, []byte("c"), nil); err != nil {
						t.Errorf("concurrent send: %v", err)
					}
				}()
			}
			wg.Wait()
			events, err := c.SubscribeEventsStore(ctx, ch, "", 4)
			if err != nil {
				t.Fatal(err)
			}
			var first Event
			select {
			case first = <-events:
			case <-time.After(5 * time.Second):
				t.Fatal("no replay")
			}
			if first.Sequence != 4 || string(first.Body) != "e3" || first.Tags["i"] != "3" {
				t.Errorf("first replayed %+v", first)
			}
			n := 1
			for n < 57 {
				select {
				case e := <-events:
					if e.Sequence != first.Sequence+uint64(n) {
						t.Fatalf("sequence %d after %d events from 4", e.Sequence, n)
					}
					n++
				case <-time.After(5 * time.Second):
					t.Fatalf("got %d of 57", n)
				}
			}
			cancel()
			for range events {
			}
		})
	}
}

func TestEventsStoreResumesAfterRestart(t *testing.T) {
	tg := targets(t, fastBroker())[0]
	c := dial(t, tg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := chanName(t)
	events, err := c.SubscribeEventsStore(ctx, ch, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	send := func(i int) {
		t.Helper()
		waitFor(t, 15*time.Second, "event stored", func() bool { return c.SendEventStore(ctx, ch, fmt.Appendf(nil, "%d", i), nil) == nil })
	}
	send(1)
	if e := <-events; string(e.Body) != "1" {
		t.Fatalf("got %q", e.Body)
	}
	tg.srv.Stop()
	tg.srv.Restart()
	send(2)
	select {
	case e := <-events:
		if string(e.Body) != "2" {
			t.Errorf("after restart got %q (seq %d), want 2", e.Body, e.Sequence)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("subscription did not come back")
	}
	cancel()
	for range events {
	}
}

func TestEvents(t *testing.T) {
	for _, tg := range targets(t, fastBroker()) {
		t.Run(tg.name, func(t *testing.T) {
			c := dial(t, tg)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ch := chanName(t)
			events, err := c.SubscribeEvents(ctx, ch, "g")
			if err != nil {
				t.Fatal(err)
			}
			// Events are not stored: send until the subscription is in place.
			var got Event
			waitFor(t, 5*time.Second, "event", func() bool {
				if err := c.SendEvent(ctx, ch, []byte("p"), map[string]string{"pct": "10"}); err != nil {
					t.Fatal(err)
				}
				select {
				case got = <-events:
					return true
				case <-time.After(50 * time.Millisecond):
					return false
				}
			})
			if string(got.Body) != "p" || got.Tags["pct"] != "10" {
				t.Errorf("event %+v", got)
			}
			cancel()
			for range events {
			}
		})
	}
}

func TestQueries(t *testing.T) {
	for _, tg := range targets(t, fastBroker()) {
		t.Run(tg.name, func(t *testing.T) {
			c := dial(t, tg)
			ctx, cancel := context.WithCancel(context.Background())
			ch := chanName(t)
			done := make(chan error, 1)
			var seenTimeout atomic.Int64
			go func() {
				done <- c.SubscribeQueries(ctx, ch, "inferq", func(ctx context.Context, q *QueryRequest) QueryResponse {
					seenTimeout.Store(int64(q.Timeout))
					if _, ok := ctx.Deadline(); !ok {
						t.Error("handler ctx without deadline")
					}
					if string(q.Body) == "fail" {
						return QueryResponse{Err: errors.New("bad input")}
					}
					return QueryResponse{Body: append([]byte("re:"), q.Body...), Tags: map[string]string{"k": q.Tags["k"]}}
				})
			}()
			var res *QueryResult
			waitFor(t, 10*time.Second, "query answered", func() bool {
				var err error
				res, err = c.Query(context.Background(), ch, []byte("hi"), map[string]string{"k": "v"}, 500*time.Millisecond)
				return err == nil
			})
			if string(res.Body) != "re:hi" || res.Tags["k"] != "v" || !res.Executed {
				t.Errorf("result %+v", res)
			}
			if got := time.Duration(seenTimeout.Load()); got != 500*time.Millisecond {
				t.Errorf("handler saw timeout %v", got)
			}
			res, err := c.Query(context.Background(), ch, []byte("fail"), nil, time.Second)
			if err != nil || !res.Executed || res.Error != "bad input" {
				t.Errorf("failing handler: %+v %v", res, err)
			}
			_, err = c.Query(context.Background(), ch+".nobody", []byte("x"), nil, 200*time.Millisecond)
			if !errors.Is(err, ErrTimeout) {
				t.Errorf("query without responder: %v, want ErrTimeout", err)
			}
			cancel()
			if err := <-done; err != nil {
				t.Errorf("subscribe queries: %v", err)
			}
		})
	}
}

func TestQueriesSurviveRestart(t *testing.T) {
	tg := targets(t, fastBroker())[0]
	c := dial(t, tg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := chanName(t)
	go func() {
		_ = c.SubscribeQueries(ctx, ch, "", func(ctx context.Context, q *QueryRequest) QueryResponse {
			return QueryResponse{Body: []byte("ok")}
		})
	}()
	ask := func() bool {
		_, err := c.Query(context.Background(), ch, []byte("x"), nil, 300*time.Millisecond)
		return err == nil
	}
	waitFor(t, 10*time.Second, "answer", ask)
	tg.srv.Stop()
	tg.srv.Restart()
	waitFor(t, 15*time.Second, "answer after restart", ask)
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want error
	}{
		{errors.New("kubemq grpc client connection lost, can't poll messages"), ErrUnavailable},
		{errors.New("kubemq grpc client connection lost, can't send messages "), ErrUnavailable},
		{errors.New("grpcClient connection error, rpc error: code = Unavailable desc = x"), ErrUnavailable},
		{errors.New("timout waiting response for poll messages request"), ErrUnavailable},
		{errors.New("transaction is not ready to accept requests or already closed by AutoAck"), ErrUnavailable},
		{status.Error(codes.Unavailable, "connection refused"), ErrUnavailable},
		{status.Error(codes.ResourceExhausted, "grpc: received message larger than max"), ErrTooLarge},
		{status.Error(codes.Unauthenticated, "Error 421: authentication verification failed, "), ErrUnauthorized},
		{status.Error(codes.PermissionDenied, "denied"), ErrUnauthorized},
		{errors.New("rpc error: code = Unknown desc = Error 421: authentication verification failed, "), ErrUnauthorized},
		{status.Error(codes.Internal, "Error 301: timeout for request message"), ErrTimeout},
		{errors.New("Error 301: timeout for request message"), ErrTimeout},
		{ErrClosed, ErrClosed},
		{errors.New("Error 120: invalid queue name value, cannot be empty, contains wildcards ,white spaces and end with dot"), ErrRefused},
		{status.Error(codes.Internal, "Error 108: invalid channel value, no white spaces are allowed"), ErrRefused},
		{status.Error(codes.Internal, "Error 107: invalid channel value, no wildcards are allowed"), ErrRefused},
		{errors.New("Error 119: invalid channel value, cannot end with `.`"), ErrRefused},
		{errors.New("Error 102: invalid channel value, cannot be empty"), ErrRefused},
		{errors.New("invalid ack sequence id 5"), nil},
		{context.Canceled, nil},
	} {
		got := classify("op", tc.err)
		if tc.want != nil && !errors.Is(got, tc.want) {
			t.Errorf("classify(%v) = %v, want %v", tc.err, got, tc.want)
		}
		if tc.want == nil && kindOf(tc.err) != nil {
			t.Errorf("classify(%v) = %v, want no sentinel", tc.err, got)
		}
		if !errors.Is(got, tc.err) && tc.err != ErrClosed {
			t.Errorf("classify(%v) lost the cause", tc.err)
		}
		if !strings.HasPrefix(got.Error(), "op: ") {
			t.Errorf("classify(%v) = %q without the op", tc.err, got)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{Address: "127.0.0.1:50000"}, true},
		{Config{Address: "localhost"}, false},
		{Config{Address: "h:0"}, false},
		{Config{Address: "h:1", TLS: TLS{Key: "k"}}, false},
		{Config{Address: "h:1", TLS: TLS{CA: "/nonexistent"}}, false},
	} {
		err := tc.cfg.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%+v: %v", tc.cfg, err)
		}
	}
}
