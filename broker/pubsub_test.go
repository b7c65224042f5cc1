package broker

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/kubemq-io/protobuf/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// psFakeStream stands in for a gRPC server stream in tests that call the
// server's methods directly. When gate is set, each Send waits for a value
// from it (or its close).
type psFakeStream[T any] struct {
	grpc.ServerStream
	ctx    context.Context
	gate   chan struct{}
	onSend func(T) // called after each Send, when set

	mu  sync.Mutex
	got []T
}

func (f *psFakeStream[T]) Context() context.Context { return f.ctx }

func (f *psFakeStream[T]) Send(v T) error {
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-f.ctx.Done():
			return f.ctx.Err()
		}
	}
	f.mu.Lock()
	f.got = append(f.got, v)
	f.mu.Unlock()
	if f.onSend != nil {
		f.onSend(v)
	}
	return nil
}

func (f *psFakeStream[T]) items() []T {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.got)
}

func psWait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// psSubscribe runs SubscribeToEvents in the background on a fake stream and
// returns it with a function that ends the subscription and waits for it.
func psSubscribe(t *testing.T, s *Server, req *pb.Subscribe, gate chan struct{}) (*psFakeStream[*pb.EventReceive], func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &psFakeStream[*pb.EventReceive]{ctx: ctx, gate: gate}
	before := s.Subscribers(req.Channel)
	done := make(chan error, 1)
	go func() { done <- s.SubscribeToEvents(req, f) }()
	psWait(t, "subscription", func() bool { return s.Subscribers(req.Channel) > before })
	var once sync.Once
	var err error
	stop := func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return f, stop
}

func psSend(t *testing.T, s *Server, ch string, store bool, bodies ...string) {
	t.Helper()
	for _, b := range bodies {
		if _, err := s.SendEvent(context.Background(), &pb.Event{ClientID: "c", Channel: ch, Body: []byte(b), Store: store}); err != nil {
			t.Fatalf("send %s: %v", b, err)
		}
	}
}

func psSeqs(items []*pb.EventReceive) []uint64 {
	out := make([]uint64, len(items))
	for i, e := range items {
		out[i] = e.Sequence
	}
	return out
}

func psRange(from, to uint64) []uint64 {
	var out []uint64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

func psNumbered(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i+1)
	}
	return out
}

func TestPSMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, channel string
		want             bool
	}{
		{"a.b", "a.b", true},
		{"a.b", "a.c", false},
		{"a.*", "a.b", true},
		{"a.*", "a.b.c", false},
		{"a.*", "a", false},
		{"*.b", "a.b", true},
		{"a.>", "a.b", true},
		{"a.>", "a.b.c", true},
		{"a.>", "a", false},
		{">", "a", true},
		{">", "a.b", true},
		{"*", "a", true},
		{"*", "a.b", false},
		{"a*", "ab", false},
		{"a.*.c", "a.b.c", true},
		{"a.*.c", "a.b.d", false},
	} {
		if got := psMatch(tc.pattern, tc.channel); got != tc.want {
			t.Errorf("psMatch(%q, %q) = %v, want %v", tc.pattern, tc.channel, got, tc.want)
		}
	}
}

func TestPSWildcardSubscription(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	f, _ := psSubscribe(t, s, &pb.Subscribe{SubscribeTypeData: pb.Subscribe_Events, ClientID: "c", Channel: "jobs.*.progress"}, nil)
	psSend(t, s, "jobs.a.progress", false, "1")
	psSend(t, s, "jobs.a.b.progress", false, "no")
	psSend(t, s, "jobs.b.progress", false, "2")
	psWait(t, "two events", func() bool { return len(f.items()) >= 2 })
	var got []string
	for _, e := range f.items() {
		got = append(got, e.Channel+"="+string(e.Body))
	}
	if want := []string{"jobs.a.progress=1", "jobs.b.progress=2"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestEventsStoreRetention(t *testing.T) {
	s := New(Options{Retention: 100 * time.Millisecond})
	defer s.Close()
	psSend(t, s, "es", true, "old1", "old2", "old3")
	time.Sleep(150 * time.Millisecond) // let the first three expire
	psSend(t, s, "es", true, "new4")
	for _, tc := range []struct {
		typ pb.Subscribe_EventsStoreType
		val int64
	}{
		{pb.Subscribe_StartFromFirst, 0},
		{pb.Subscribe_StartAtSequence, 1},
		{pb.Subscribe_StartFromLast, 0},
		{pb.Subscribe_StartAtTimeDelta, 3600},
	} {
		f, stop := psSubscribe(t, s, &pb.Subscribe{SubscribeTypeData: pb.Subscribe_EventsStore, ClientID: "c", Channel: "es", EventsStoreTypeData: tc.typ, EventsStoreTypeValue: tc.val}, nil)
		psWait(t, "replay", func() bool { return len(f.items()) >= 1 })
		_ = stop()
		if got := f.items(); len(got) != 1 || got[0].Sequence != 4 || string(got[0].Body) != "new4" {
			t.Errorf("%v: replay %v, want only sequence 4", tc.typ, got)
		}
	}
}

func TestEventsStoreStartAtSequenceBeyondLast(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	psSend(t, s, "es", true, "1", "2")
	f, _ := psSubscribe(t, s, &pb.Subscribe{SubscribeTypeData: pb.Subscribe_EventsStore, ClientID: "c", Channel: "es", EventsStoreTypeData: pb.Subscribe_StartAtSequence, EventsStoreTypeValue: 100}, nil)
	psSend(t, s, "es", true, "3")
	psWait(t, "new event", func() bool { return len(f.items()) >= 1 })
	if got := psSeqs(f.items()); !slices.Equal(got, []uint64{3}) {
		t.Errorf("got sequences %v, want [3]", got)
	}
}

// A slow events store subscriber holds up nobody and loses nothing.
func TestEventsStoreSlowSubscriberLosesNothing(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	s.pubsub.storeBuffer = 2
	gate := make(chan struct{})
	f, _ := psSubscribe(t, s, &pb.Subscribe{SubscribeTypeData: pb.Subscribe_EventsStore, ClientID: "c", Channel: "es", EventsStoreTypeData: pb.Subscribe_StartNewOnly}, gate)
	start := time.Now()
	psSend(t, s, "es", true, psNumbered("e", 500)...)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("500 sends took %v behind a stuck subscriber", d)
	}
	close(gate)
	psWait(t, "every event", func() bool { return len(f.items()) >= 500 })
	if got := psSeqs(f.items()); !slices.Equal(got, psRange(1, 500)) {
		t.Errorf("got sequences %v, want 1..500 in order", got)
	}
}

// A slow events subscriber holds up nobody; what does not fit its buffer is
// dropped for it.
func TestEventsSlowSubscriberDrops(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	fast, _ := psSubscribe(t, s, &pb.Subscribe{SubscribeTypeData: pb.Subscribe_Events, ClientID: "fast", Channel: "ev"}, nil)
	s.pubsub.memberBuffer = 4
	gate := make(chan struct{})
	slow, _ := psSubscribe(t, s, &pb.Subscribe{SubscribeTypeData: pb.Subscribe_Events, ClientID: "slow", Channel: "ev"}, gate)
	psSend(t, s, "ev", false, psNumbered("e", 100)...)
	psWait(t, "fast subscriber gets all", func() bool { return len(fast.items()) >= 100 })
	close(gate)
	// One event was in the stuck Send and four in the buffer; once they are
	// out the buffer has room again.
	psWait(t, "the slow subscriber's backlog", func() bool { return len(slow.items()) >= 5 })
	psSend(t, s, "ev", false, "end")
	psWait(t, "end marker", func() bool {
		got := slow.items()
		return len(got) > 0 && string(got[len(got)-1].Body) == "end"
	})
	if n := len(slow.items()); n != 4+1+1 {
		t.Errorf("slow subscriber got %d events, want its buffer, the one in flight and the marker", n)
	}
}

func TestEventsStoreGroupMemberLeaves(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	s.pubsub.storeBuffer = 4
	req := &pb.Subscribe{SubscribeTypeData: pb.Subscribe_EventsStore, ClientID: "c", Channel: "es", Group: "g", EventsStoreTypeData: pb.Subscribe_StartFromFirst}
	_, stopStuck := psSubscribe(t, s, req, make(chan struct{})) // never sends
	req2 := *req
	req2.ClientID = "c2" // one open events store subscription per client id
	live, _ := psSubscribe(t, s, &req2, nil)
	psSend(t, s, "es", true, psNumbered("e", 20)...)
	psWait(t, "live member's share", func() bool { return len(live.items()) >= 15 })
	_ = stopStuck() // its Send fails with the stream's context
	// The stuck member held 4 in its buffer and 1 in a Send that failed:
	// the 4 go to the live member, the one in flight is lost.
	psWait(t, "redelivered events", func() bool { return len(live.items()) >= 19 })
	seqs := psSeqs(live.items())
	slices.Sort(seqs)
	if len(slices.Compact(slices.Clone(seqs))) != len(seqs) || len(seqs) != 19 {
		t.Errorf("live member got %v, want 19 distinct", seqs)
	}
}

func TestEventsStoreGroupSharesCursor(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	psSend(t, s, "es", true, psNumbered("e", 6)...)
	first := &pb.Subscribe{SubscribeTypeData: pb.Subscribe_EventsStore, ClientID: "a", Channel: "es", Group: "g", EventsStoreTypeData: pb.Subscribe_StartFromFirst}
	a, _ := psSubscribe(t, s, first, nil)
	psWait(t, "replay", func() bool { return len(a.items()) >= 6 })
	// A second member joins the group's cursor; its own policy is ignored.
	second := &pb.Subscribe{SubscribeTypeData: pb.Subscribe_EventsStore, ClientID: "b", Channel: "es", Group: "g", EventsStoreTypeData: pb.Subscribe_StartFromFirst}
	b, _ := psSubscribe(t, s, second, nil)
	psSend(t, s, "es", true, "e7", "e8")
	psWait(t, "live events", func() bool { return len(a.items())+len(b.items()) >= 8 })
	if n := len(a.items()) + len(b.items()); n != 8 {
		t.Errorf("group got %d events, want 8", n)
	}
}

func TestQueriesGroupRoundRobinAndCommandsApart(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type answerer struct {
		f    *psFakeStream[*pb.Request]
		done chan error
	}
	var members []answerer
	for i := range 2 {
		f := &psFakeStream[*pb.Request]{ctx: ctx}
		a := answerer{f: f, done: make(chan error, 1)}
		go func() {
			a.done <- s.SubscribeToRequests(&pb.Subscribe{SubscribeTypeData: pb.Subscribe_Queries, ClientID: fmt.Sprint("m", i), Channel: "q", Group: "g"}, f)
		}()
		members = append(members, a)
	}
	psWait(t, "members", func() bool { return s.Subscribers("q") == 2 })
	for i := range 4 {
		go func() {
			_, _ = s.SendRequest(ctx, &pb.Request{RequestTypeData: pb.Request_Query, ClientID: "c", Channel: "q", Body: []byte{byte(i)}, Timeout: 50})
		}()
	}
	psWait(t, "queries delivered", func() bool { return len(members[0].f.items())+len(members[1].f.items()) >= 4 })
	if a, b := len(members[0].f.items()), len(members[1].f.items()); a != 2 || b != 2 {
		t.Errorf("round-robin gave %d and %d, want 2 each", a, b)
	}
	_, err := s.SendRequest(ctx, &pb.Request{RequestTypeData: pb.Request_Command, ClientID: "c", Channel: "q", Body: []byte("x"), Timeout: 20})
	if st, _ := status.FromError(err); st.Message() != "Error 301: timeout for request message" {
		t.Errorf("command to a queries-only channel: %v", err)
	}
	cancel()
	for _, m := range members {
		if err := <-m.done; err != nil {
			t.Errorf("subscription ended with %v", err)
		}
	}
}

// psServerGoroutines lists the goroutines running the server's pub/sub
// code.
func psServerGoroutines() []string {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 2)
	var out []string
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(g, "psServerGoroutines") {
			continue
		}
		if strings.Contains(g, "broker.(*Server).Subscribe") || strings.Contains(g, "broker.(*Server).Send") ||
			strings.Contains(g, "broker.psServe") || strings.Contains(g, "broker.(*pubSub)") {
			out = append(out, g)
		}
	}
	return out
}

// Close ends every stream and waiting request, over real gRPC, and leaves no
// goroutine behind.
func TestPubSubCloseEndsEverything(t *testing.T) {
	s := New(Options{})
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewKubemqClient(conn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	type end struct {
		name string
		err  error
	}
	var ends sync.WaitGroup
	errs := make(chan end, 8)
	recv := func(name string, r func() error) {
		ends.Add(1)
		go func() {
			defer ends.Done()
			for {
				if err := r(); err != nil {
					errs <- end{name, err}
					return
				}
			}
		}()
	}
	ev, err := c.SubscribeToEvents(ctx, &pb.Subscribe{SubscribeTypeData: pb.Subscribe_Events, ClientID: "a", Channel: "ch", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	recv("events", func() error { _, err := ev.Recv(); return err })
	es, err := c.SubscribeToEvents(ctx, &pb.Subscribe{SubscribeTypeData: pb.Subscribe_EventsStore, ClientID: "b", Channel: "ch", EventsStoreTypeData: pb.Subscribe_StartFromFirst})
	if err != nil {
		t.Fatal(err)
	}
	recv("events store", func() error { _, err := es.Recv(); return err })
	q, err := c.SubscribeToRequests(ctx, &pb.Subscribe{SubscribeTypeData: pb.Subscribe_Queries, ClientID: "c", Channel: "ch"})
	if err != nil {
		t.Fatal(err)
	}
	recv("queries", func() error { _, err := q.Recv(); return err })
	psWait(t, "three subscriptions", func() bool { return s.Subscribers("ch") == 3 })

	up, err := c.SendEventsStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := up.Send(&pb.Event{ClientID: "d", Channel: "ch", Body: []byte("x"), Store: true}); err != nil {
		t.Fatal(err)
	}
	if r, err := up.Recv(); err != nil || !r.Sent {
		t.Fatalf("stream send: %v %v", r, err)
	}
	recv("events stream", func() error { _, err := up.Recv(); return err })
	ends.Add(1)
	go func() {
		defer ends.Done()
		_, err := c.SendRequest(ctx, &pb.Request{RequestTypeData: pb.Request_Query, ClientID: "e", Channel: "ch", Body: []byte("x"), Timeout: 60000})
		errs <- end{"request", err}
	}()
	psWait(t, "waiting request", func() bool {
		s.pubsub.pendingMu.Lock()
		defer s.pubsub.pendingMu.Unlock()
		return len(s.pubsub.pending) == 1
	})

	if len(psServerGoroutines()) == 0 {
		t.Fatal("psServerGoroutines sees none of the open streams")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ends.Wait()
	close(errs)
	for e := range errs {
		if e.err == nil {
			t.Errorf("%s ended without an error after Close", e.name)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for left := psServerGoroutines(); len(left) > 0; left = psServerGoroutines() {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines left after Close:\n%s", strings.Join(left, "\n\n"))
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := s.SendEvent(ctx, &pb.Event{ClientID: "a", Channel: "ch", Body: []byte("x")}); status.Code(err) != codes.Unavailable {
		t.Errorf("send after close: %v, want Unavailable", err)
	}
}

// Subscribers that go away while events flow leave cleanly: senders see no
// error, the subscriptions are gone, and no handler stays behind.
func TestSubscriberDisconnectMidSend(t *testing.T) {
	s := New(Options{})
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewKubemqClient(conn)
	for _, req := range []*pb.Subscribe{
		{SubscribeTypeData: pb.Subscribe_Events, ClientID: "a", Channel: "ev"},
		{SubscribeTypeData: pb.Subscribe_Events, ClientID: "a", Channel: "ev", Group: "g"},
		{SubscribeTypeData: pb.Subscribe_EventsStore, ClientID: "a", Channel: "ev", EventsStoreTypeData: pb.Subscribe_StartFromFirst},
		{SubscribeTypeData: pb.Subscribe_EventsStore, ClientID: "a", Channel: "ev", Group: "g", EventsStoreTypeData: pb.Subscribe_StartFromFirst},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		stream, err := c.SubscribeToEvents(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		psWait(t, "subscription", func() bool { return s.Subscribers("ev") == 1 })
		sent := make(chan error, 1)
		go func() {
			for i := range 2000 {
				if _, err := s.SendEvent(context.Background(), &pb.Event{ClientID: "p", Channel: "ev", Body: []byte("x"), Store: i%2 == 0}); err != nil {
					sent <- err
					return
				}
			}
			sent <- nil
		}()
		for range 10 {
			if _, err := stream.Recv(); err != nil {
				t.Fatalf("%v: %v", req, err)
			}
		}
		cancel()
		if err := <-sent; err != nil {
			t.Fatalf("send while a subscriber left: %v", err)
		}
		psWait(t, "subscription gone", func() bool { return s.Subscribers("ev") == 0 })
		psWait(t, "handler gone", func() bool { return len(psServerGoroutines()) == 0 })
	}
}

// FuzzPubSub drives the pub/sub methods with arbitrary fields: they answer
// with a gRPC status or a result, never panic, and leave no subscription
// behind.
func FuzzPubSub(f *testing.F) {
	type seed struct {
		clientID, channel, group, metadata string
		body                               []byte
		store                              bool
		subType, storeType                 int32
		storeValue                         int64
		reqType, timeout                   int32
		cacheKey                           string
		cacheTTL                           int32
		reply, requestID                   string
	}
	for _, s := range []seed{
		{"c", "ch", "", "m", []byte("b"), false, 1, 0, 0, 2, 5, "", 0, "", "r"},
		{"c", "ch", "g", "", []byte("b"), true, 2, 2, 0, 1, 5, "", 0, "_INBOX.x", "r"},
		{"c", "a.*", "g", "m", nil, false, 1, 0, 0, 2, 5, "k", 0, "", ""},
		{"", "", "", "", nil, false, 0, 0, 0, 0, 0, "", 0, "", ""},
		{"c", "ch.", "", "m", nil, true, 2, 4, -1, 3, -5, "", 0, "a b", "r"},
		{"c", "ch", "", "m", nil, true, 2, 5, 1, 2, 5, "k", 10, "_INBOX.>", "r"},
		{"c", "ch", "", "m", nil, true, 2, 6, 1 << 62, 2, 5, "", 0, "", "r"},
		{"c", "ch", "g", "m", nil, true, 2, 99, 7, 2, 5, "", 0, "", "r"},
		{"c", "x y", "", "m", nil, true, 4, 3, 0, 1, 5, "", 0, "", "r"},
	} {
		f.Add(s.clientID, s.channel, s.group, s.metadata, s.body, s.store, s.subType, s.storeType, s.storeValue, s.reqType, s.timeout, s.cacheKey, s.cacheTTL, s.reply, s.requestID)
	}
	srv := New(Options{Retention: time.Minute})
	f.Cleanup(func() { srv.Close() })
	f.Fuzz(func(t *testing.T, clientID, channel, group, metadata string, body []byte, store bool,
		subType, storeType int32, storeValue int64, reqType, timeout int32, cacheKey string, cacheTTL int32, reply, requestID string) {
		ctx := context.Background()
		okStatus := func(what string, err error) {
			if err == nil {
				return
			}
			st, ok := status.FromError(err)
			if !ok || (st.Code() != codes.Internal && st.Code() != codes.Unavailable) {
				t.Fatalf("%s: %v is not an Internal or Unavailable status", what, err)
			}
		}
		sub := &pb.Subscribe{
			SubscribeTypeData:    pb.Subscribe_SubscribeType(subType),
			ClientID:             clientID,
			Channel:              channel,
			Group:                group,
			EventsStoreTypeData:  pb.Subscribe_EventsStoreType(storeType),
			EventsStoreTypeValue: storeValue,
		}
		subCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		evStream := &psFakeStream[*pb.EventReceive]{ctx: subCtx}
		evDone := make(chan error, 1)
		go func() { evDone <- srv.SubscribeToEvents(sub, evStream) }()

		// A responder that answers every request it gets.
		reqStream := &psFakeStream[*pb.Request]{ctx: subCtx, onSend: func(r *pb.Request) {
			_, err := srv.SendResponse(ctx, &pb.Response{ClientID: clientID, RequestID: r.RequestID, ReplyChannel: r.ReplyChannel, Metadata: metadata, Executed: true})
			okStatus("SendResponse to a request", err)
		}}
		reqDone := make(chan error, 1)
		go func() { reqDone <- srv.SubscribeToRequests(sub, reqStream) }()

		res, err := srv.SendEvent(ctx, &pb.Event{EventID: requestID, ClientID: clientID, Channel: channel, Metadata: metadata, Body: body, Store: store})
		okStatus("SendEvent", err)
		if err == nil && (res == nil || !res.Sent || res.EventID == "") {
			t.Fatalf("SendEvent result %+v", res)
		}
		if timeout > 5 {
			timeout = 5
		}
		reqCtx, reqCancel := context.WithTimeout(ctx, time.Second)
		_, err = srv.SendRequest(reqCtx, &pb.Request{
			RequestID: requestID, RequestTypeData: pb.Request_RequestType(reqType), ClientID: clientID, Channel: channel,
			Metadata: metadata, Body: body, Timeout: timeout, CacheKey: cacheKey, CacheTTL: cacheTTL,
		})
		reqCancel()
		okStatus("SendRequest", err)
		_, err = srv.SendResponse(ctx, &pb.Response{ClientID: clientID, RequestID: requestID, ReplyChannel: reply, Body: body})
		okStatus("SendResponse", err)

		cancel()
		okStatus("SubscribeToEvents", <-evDone)
		okStatus("SubscribeToRequests", <-reqDone)
		if n := srv.Subscribers(channel); n != 0 {
			t.Fatalf("%d subscriptions left on %q", n, channel)
		}
	})
}
