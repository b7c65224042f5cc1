package broker_test

// Conformance rows for events, events store, commands and queries, through
// the real kubemq-go v1.9.0 legacy client (and raw gRPC for the requests the
// client cannot make). Helpers here are prefixed "ps" so that they do not
// meet the queue half's helpers in this package.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kubemq-io/kubemq-go"
	pb "github.com/kubemq-io/protobuf/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// psClient connects a kubemq-go legacy client to tg, closed at cleanup.
func psClient(t *testing.T, tg *target, clientID string) *kubemq.Client {
	t.Helper()
	host, portText, err := net.SplitHostPort(tg.Addr)
	if err != nil {
		t.Fatalf("split %q: %v", tg.Addr, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		t.Fatalf("port %q: %v", portText, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c, err := kubemq.NewClient(ctx,
		kubemq.WithAddress(host, port),
		kubemq.WithClientId(clientID),
		kubemq.WithTransportType(kubemq.TransportTypeGRPC))
	if err != nil {
		cancel()
		t.Fatalf("connect %s: %v", clientID, err)
	}
	t.Cleanup(func() {
		cancel()
		_ = c.Close()
	})
	return c
}

// psRaw is a plain gRPC client of tg, for requests kubemq-go cannot make.
func psRaw(t *testing.T, tg *target) pb.KubemqClient {
	t.Helper()
	conn, err := grpc.NewClient(tg.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", tg.Addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewKubemqClient(conn)
}

// psID is a client id unique to this run: the real broker keys its events
// store subscribers by client id and refuses a second one with the same id.
func psID(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// psCtx is a context that ends with the test.
func psCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

// psSettle waits until n subscriptions are open on channel. The real broker
// cannot be asked, so against it this waits a fixed second.
func psSettle(t *testing.T, tg *target, channel string, n int) {
	t.Helper()
	if tg.Embedded == nil {
		time.Sleep(time.Second)
		return
	}
	waitFor(t, 5*time.Second, fmt.Sprintf("%d subscribers on %s", n, channel), func() bool {
		return tg.Embedded.Subscribers(channel) >= n
	})
}

// psBox collects what a subscription receives.
type psBox[T any] struct {
	mu   sync.Mutex
	got  []T
	errs []error
}

func (b *psBox[T]) items() []T {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.got)
}

func (b *psBox[T]) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.got)
}

func (b *psBox[T]) firstErr() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.errs) == 0 {
		return nil
	}
	return b.errs[0]
}

// psCollect drains ch and errCh into a psBox until ctx ends.
func psCollect[T any](ctx context.Context, ch <-chan T, errCh <-chan error) *psBox[T] {
	b := &psBox[T]{}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case v := <-ch:
				b.mu.Lock()
				b.got = append(b.got, v)
				b.mu.Unlock()
			case err := <-errCh:
				b.mu.Lock()
				b.errs = append(b.errs, err)
				b.mu.Unlock()
			}
		}
	}()
	return b
}

func psSubEvents(t *testing.T, c *kubemq.Client, channel, group string) *psBox[*kubemq.Event] {
	t.Helper()
	ctx := psCtx(t)
	errCh := make(chan error, 4)
	ch, err := c.SubscribeToEvents(ctx, channel, group, errCh)
	if err != nil {
		t.Fatalf("subscribe events %s: %v", channel, err)
	}
	return psCollect(ctx, ch, errCh)
}

func psSubStore(t *testing.T, c *kubemq.Client, channel, group string, opt kubemq.SubscriptionOption) *psBox[*kubemq.EventStoreReceive] {
	t.Helper()
	ctx := psCtx(t)
	errCh := make(chan error, 4)
	ch, err := c.SubscribeToEventsStore(ctx, channel, group, errCh, opt)
	if err != nil {
		t.Fatalf("subscribe events store %s: %v", channel, err)
	}
	return psCollect(ctx, ch, errCh)
}

func psSendEvents(t *testing.T, c *kubemq.Client, channel, prefix string, n int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		err := c.NewEvent().SetChannel(channel).SetBody([]byte(prefix + strconv.Itoa(i))).Send(psCtx(t))
		if err != nil {
			t.Fatalf("send event %d: %v", i, err)
		}
	}
}

func psSendStore(t *testing.T, c *kubemq.Client, channel, prefix string, n int) {
	t.Helper()
	psSendStoreFrom(t, c, channel, prefix, 1, n)
}

// psGap separates events whose stamps a test tells apart.
const psGap = 100 * time.Millisecond

func psSendStoreFrom(t *testing.T, c *kubemq.Client, channel, prefix string, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		res, err := c.NewEventStore().SetChannel(channel).SetBody([]byte(prefix + strconv.Itoa(i))).Send(psCtx(t))
		if err != nil || !res.Sent {
			t.Fatalf("send events store %d: %v %+v", i, err, res)
		}
	}
}

func psBodies[T any](items []T, body func(T) []byte) []string {
	out := make([]string, len(items))
	for i, v := range items {
		out[i] = string(body(v))
	}
	return out
}

func psNames(prefix string, from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, prefix+strconv.Itoa(i))
	}
	return out
}

func psEventBody(e *kubemq.Event) []byte             { return e.Body }
func psStoreBody(e *kubemq.EventStoreReceive) []byte { return e.Body }

func TestEventsFanOutWithoutGroup(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		ch := channel(t, "ev")
		a := psSubEvents(t, psClient(t, tg, "sub-a"), ch, "")
		b := psSubEvents(t, psClient(t, tg, "sub-b"), ch, "")
		psSettle(t, tg, ch, 2)
		psSendEvents(t, psClient(t, tg, "pub"), ch, "e", 10)
		want := psNames("e", 1, 10)
		for name, box := range map[string]*psBox[*kubemq.Event]{"a": a, "b": b} {
			waitFor(t, 5*time.Second, "subscriber "+name+" gets all", func() bool { return box.len() >= 10 })
			if got := psBodies(box.items(), psEventBody); !slices.Equal(got, want) {
				t.Errorf("subscriber %s got %v, want %v", name, got, want)
			}
			for _, e := range box.items() {
				if e.Channel != ch || e.Id == "" {
					t.Errorf("subscriber %s: event channel %q id %q", name, e.Channel, e.Id)
				}
			}
		}
	})
}

func TestEventsGroupSplit(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		ch := channel(t, "ev")
		g1 := psSubEvents(t, psClient(t, tg, "g1"), ch, "workers")
		g2 := psSubEvents(t, psClient(t, tg, "g2"), ch, "workers")
		all := psSubEvents(t, psClient(t, tg, "all"), ch, "")
		psSettle(t, tg, ch, 3)
		const n = 20
		psSendEvents(t, psClient(t, tg, "pub"), ch, "e", n)
		waitFor(t, 5*time.Second, "group and plain subscriber get every event", func() bool {
			return g1.len()+g2.len() >= n && all.len() >= n
		})
		got := append(psBodies(g1.items(), psEventBody), psBodies(g2.items(), psEventBody)...)
		slices.Sort(got)
		want := psNames("e", 1, n)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("group got %v, want each of %v once", got, want)
		}
		if g1.len() == 0 || g2.len() == 0 {
			t.Errorf("group split %d/%d, want both members used", g1.len(), g2.len())
		}
		if all.len() != n {
			t.Errorf("plain subscriber got %d, want %d", all.len(), n)
		}
	})
}

func TestEventsNoSubscriberIsLost(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		ch := channel(t, "ev")
		pub := psClient(t, tg, "pub")
		psSendEvents(t, pub, ch, "before", 1)
		box := psSubEvents(t, psClient(t, tg, "late"), ch, "")
		psSettle(t, tg, ch, 1)
		psSendEvents(t, pub, ch, "after", 1)
		waitFor(t, 5*time.Second, "the event sent after subscribing", func() bool { return box.len() >= 1 })
		if got := psBodies(box.items(), psEventBody); !slices.Equal(got, []string{"after1"}) {
			t.Errorf("got %v, want only the event sent after subscribing", got)
		}
	})
}

func TestEventsWildcard(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		base := channel(t, "ev")
		one := psSubEvents(t, psClient(t, tg, "one"), base+".*", "")
		rest := psSubEvents(t, psClient(t, tg, "rest"), base+".>", "")
		psSettle(t, tg, base+".*", 1)
		psSettle(t, tg, base+".>", 1)
		pub := psClient(t, tg, "pub")
		psSendEvents(t, pub, base+".a", "a", 1)
		psSendEvents(t, pub, base+".a.b", "ab", 1)
		psSendEvents(t, pub, base+".c", "c", 1)
		waitFor(t, 5*time.Second, "wildcard deliveries", func() bool { return one.len() >= 2 && rest.len() >= 3 })
		if got := psBodies(one.items(), psEventBody); !slices.Equal(got, []string{"a1", "c1"}) {
			t.Errorf("%s.* got %v", base, got)
		}
		if got := psBodies(rest.items(), psEventBody); !slices.Equal(got, []string{"a1", "ab1", "c1"}) {
			t.Errorf("%s.> got %v", base, got)
		}
		if got := one.items(); got[0].Channel != base+".a" {
			t.Errorf("event channel %q, want the channel it was sent to", got[0].Channel)
		}
	})
}

func TestEventsStreamSend(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		ch := channel(t, "ev")
		box := psSubEvents(t, psClient(t, tg, "sub"), ch, "")
		psSettle(t, tg, ch, 1)
		pub := psClient(t, tg, "pub")
		ctx := psCtx(t)
		events := make(chan *kubemq.Event, 1)
		errCh := make(chan error, 16)
		go pub.StreamEvents(ctx, events, errCh)
		for i := 1; i <= 10; i++ {
			events <- pub.NewEvent().SetChannel(ch).SetBody([]byte("s" + strconv.Itoa(i)))
		}
		waitFor(t, 5*time.Second, "streamed events", func() bool { return box.len() >= 10 })
		if got, want := psBodies(box.items(), psEventBody), psNames("s", 1, 10); !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
		// A bad event on the stream comes back as an error, the stream lives.
		events <- pub.NewEvent().SetChannel(ch)
		select {
		case err := <-errCh:
			if !strings.Contains(err.Error(), "Error 110: invalid message, cannot be empty") {
				t.Errorf("empty event error %q", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("no error for an empty event")
		}
	})
}

// TestPlainEventsOnAStreamAreAnsweredOnlyWhenRefused: fact 42. On a
// SendEventsStream the broker answers a plain event only when it refuses it
// (an events store event always), and ends the call once the client closed
// its side and everything before was read. What mq.EventStream relies on:
// it waits for no answer, reports what comes back as a refusal, and ends
// with CloseSend.
func TestPlainEventsOnAStreamAreAnsweredOnlyWhenRefused(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		ctx, cancel := context.WithTimeout(psCtx(t), 20*time.Second)
		defer cancel()
		stream, err := psRaw(t, tg).SendEventsStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ch, id := channel(t, "ev"), psID("plain")
		for i := range 50 {
			if err := stream.Send(&pb.Event{EventID: fmt.Sprint("ok-", i), ClientID: id, Channel: ch, Body: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		}
		if err := stream.Send(&pb.Event{EventID: "empty", ClientID: id, Channel: ch}); err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&pb.Event{EventID: "stored", ClientID: id, Channel: ch, Body: []byte("x"), Store: true}); err != nil {
			t.Fatal(err)
		}
		if err := stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		got := map[string]*pb.Result{}
		for {
			res, err := stream.Recv()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("recv: %v (answers so far %v)", err, got)
				}
				break
			}
			got[res.EventID] = res
		}
		if len(got) != 2 || got["empty"] == nil || got["empty"].Sent || got["stored"] == nil || !got["stored"].Sent {
			t.Errorf("answers: %v; want a refusal of \"empty\" and a receipt of \"stored\" only", got)
		}
	})
}

func TestEventsStoreStartPolicies(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		pub := psClient(t, tg, "pub")
		// Just before the stamp of the third event, learnt from a first
		// subscription so that the check does not depend on the client's
		// clock. The real broker turns the time into a delta from its now
		// and back, so the start is a little later than asked: the third
		// event is sent well after the second and the start put between.
		ts3 := func(t *testing.T, ch string) time.Time {
			box := psSubStore(t, psClient(t, tg, psID("probe")), ch, "", kubemq.StartFromFirstEvent())
			waitFor(t, 5*time.Second, "replay for the probe", func() bool { return box.len() >= 3 })
			return box.items()[2].Timestamp.Add(-psGap / 2)
		}
		cases := []struct {
			name   string
			opt    func(t *testing.T, ch string) kubemq.SubscriptionOption
			replay []string
		}{
			{"new-only", func(*testing.T, string) kubemq.SubscriptionOption { return kubemq.StartFromNewEvents() }, nil},
			{"first", func(*testing.T, string) kubemq.SubscriptionOption { return kubemq.StartFromFirstEvent() }, psNames("pre", 1, 5)},
			{"last", func(*testing.T, string) kubemq.SubscriptionOption { return kubemq.StartFromLastEvent() }, psNames("pre", 5, 5)},
			{"sequence", func(*testing.T, string) kubemq.SubscriptionOption { return kubemq.StartFromSequence(3) }, psNames("pre", 3, 5)},
			{"time", func(t *testing.T, ch string) kubemq.SubscriptionOption { return kubemq.StartFromTime(ts3(t, ch)) }, psNames("pre", 3, 5)},
			{"time-delta", func(*testing.T, string) kubemq.SubscriptionOption { return kubemq.StartFromTimeDelta(time.Hour) }, psNames("pre", 1, 5)},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				ch := channel(t, "es")
				psSendStore(t, pub, ch, "pre", 2)
				time.Sleep(psGap)
				psSendStoreFrom(t, pub, ch, "pre", 3, 5)
				opt := tc.opt(t, ch)
				subs := []*psBox[*kubemq.EventStoreReceive]{
					psSubStore(t, psClient(t, tg, psID("sub-a")), ch, "", opt),
					psSubStore(t, psClient(t, tg, psID("sub-b")), ch, "", opt),
				}
				n := 2
				if tc.name == "time" {
					n++ // the probe is still subscribed
				}
				psSettle(t, tg, ch, n)

				ctx := psCtx(t)
				events := make(chan *kubemq.EventStore, 1)
				results := make(chan *kubemq.EventStoreResult, 8)
				errCh := make(chan error, 8)
				go pub.StreamEventsStore(ctx, events, results, errCh)
				for i := 1; i <= 3; i++ {
					events <- pub.NewEventStore().SetChannel(ch).SetBody([]byte("live" + strconv.Itoa(i)))
					select {
					case r := <-results:
						if !r.Sent || r.Err != nil || r.Id == "" {
							t.Fatalf("stream result %+v", r)
						}
					case err := <-errCh:
						t.Fatalf("stream events store: %v", err)
					case <-time.After(5 * time.Second):
						t.Fatalf("no result for live event %d", i)
					}
				}

				want := append(slices.Clone(tc.replay), psNames("live", 1, 3)...)
				for k, box := range subs {
					waitFor(t, 5*time.Second, fmt.Sprintf("subscriber %d gets replay and live events", k), func() bool {
						return box.len() >= len(want)
					})
					items := box.items()
					if got := psBodies(items, psStoreBody); !slices.Equal(got, want) {
						t.Errorf("subscriber %d got %v, want %v", k, got, want)
					}
					for i, e := range items {
						// pre-i carries sequence i; live-j 5+j.
						n, _ := strconv.Atoi(strings.TrimLeft(string(e.Body), "prelive"))
						seq := uint64(n)
						if strings.HasPrefix(string(e.Body), "live") {
							seq += 5
						}
						if e.Sequence != seq {
							t.Errorf("subscriber %d item %d %s: sequence %d, want %d", k, i, e.Body, e.Sequence, seq)
						}
						if e.Timestamp.Before(time.Now().Add(-time.Hour)) || e.Channel != ch || e.Id == "" {
							t.Errorf("subscriber %d item %d: timestamp %v channel %q id %q", k, i, e.Timestamp, e.Channel, e.Id)
						}
					}
				}
			})
		}
	})
}

func TestEventsStoreGroup(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		ch := channel(t, "es")
		pub := psClient(t, tg, "pub")
		psSendStore(t, pub, ch, "pre", 10)
		g1 := psSubStore(t, psClient(t, tg, psID("g1")), ch, "workers", kubemq.StartFromFirstEvent())
		g2 := psSubStore(t, psClient(t, tg, psID("g2")), ch, "workers", kubemq.StartFromFirstEvent())
		psSettle(t, tg, ch, 2)
		psSendStore(t, pub, ch, "live", 10)
		waitFor(t, 5*time.Second, "group gets every event", func() bool { return g1.len()+g2.len() >= 20 })
		var seqs []uint64
		for _, e := range append(g1.items(), g2.items()...) {
			seqs = append(seqs, e.Sequence)
		}
		slices.Sort(seqs)
		for i, s := range seqs {
			if s != uint64(i+1) {
				t.Fatalf("group got sequences %v, want 1..20 once each", seqs)
			}
		}
		if len(seqs) != 20 {
			t.Errorf("group got %d events, want 20", len(seqs))
		}
	})
}

func TestEventsStoreInvalidStart(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		for _, tc := range []struct {
			opt  kubemq.SubscriptionOption
			want string
		}{
			{kubemq.StartFromSequence(0), "rpc error: code = Internal desc = Error 112: invalid subscription type start at sequence value, cannot by 0 or negative"},
			{kubemq.StartFromTime(time.Unix(0, 0)), "rpc error: code = Internal desc = Error 113: invalid subscription type start at time value, cannot by 0 or negative"},
			{kubemq.StartFromTimeDelta(time.Millisecond), "rpc error: code = Internal desc = Error 114: invalid subscription type start at time delta value, cannot by 0 or negative"},
		} {
			box := psSubStore(t, psClient(t, tg, psID("sub")), channel(t, "es"), "", tc.opt)
			waitFor(t, 5*time.Second, "subscribe error "+tc.want[:40], func() bool { return box.firstErr() != nil })
			if got := box.firstErr().Error(); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		}
	})
}

// TestPubSubErrors checks the errors of requests kubemq-go would refuse to
// make or that need a raw stream: their code and exact text.
func TestPubSubErrors(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		raw := psRaw(t, tg)
		ctx := psCtx(t)
		ch := channel(t, "err")
		body := []byte("x")
		unary := []struct {
			name string
			call func() error
			want string // "" for success
		}{
			{"event no client", func() error {
				_, err := raw.SendEvent(ctx, &pb.Event{Channel: ch, Body: body})
				return err
			}, "Error 101: invalid clientID value, cannot be empty"},
			{"event no channel", func() error {
				_, err := raw.SendEvent(ctx, &pb.Event{ClientID: "c", Body: body})
				return err
			}, "Error 102: invalid channel value, cannot be empty"},
			{"event trailing dot", func() error {
				_, err := raw.SendEvent(ctx, &pb.Event{ClientID: "c", Channel: ch + ".", Body: body})
				return err
			}, "Error 119: invalid channel value, cannot end with `.`"},
			{"event space", func() error {
				_, err := raw.SendEvent(ctx, &pb.Event{ClientID: "c", Channel: "a b", Body: body, Store: true})
				return err
			}, "Error 108: invalid channel value, no white spaces are allowed"},
			{"event wildcard", func() error {
				_, err := raw.SendEvent(ctx, &pb.Event{ClientID: "c", Channel: ch + ".*", Body: body})
				return err
			}, "Error 107: invalid channel value, no wildcards are allowed"},
			{"event empty", func() error {
				_, err := raw.SendEvent(ctx, &pb.Event{ClientID: "c", Channel: ch, Store: true})
				return err
			}, "Error 110: invalid message, cannot be empty"},
			{"request type", func() error {
				_, err := raw.SendRequest(ctx, &pb.Request{ClientID: "c", Channel: ch, Body: body, Timeout: 100})
				return err
			}, "Error 206: invalid request type"},
			{"request timeout value", func() error {
				_, err := raw.SendRequest(ctx, &pb.Request{RequestTypeData: pb.Request_Query, ClientID: "c", Channel: ch, Body: body})
				return err
			}, "Error 109: invalid set timeout value, cannot be 0 or negative"},
			{"request empty", func() error {
				_, err := raw.SendRequest(ctx, &pb.Request{RequestTypeData: pb.Request_Command, ClientID: "c", Channel: ch, Timeout: 100})
				return err
			}, "Error 115: invalid request, cannot be empty"},
			{"request cache ttl", func() error {
				_, err := raw.SendRequest(ctx, &pb.Request{RequestTypeData: pb.Request_Query, ClientID: "c", Channel: ch, Body: body, Timeout: 100, CacheKey: "k"})
				return err
			}, "Error 116: invalid cache ttl value, cannot be 0 or negative"},
			{"response no reply channel", func() error {
				_, err := raw.SendResponse(ctx, &pb.Response{ClientID: "c", RequestID: "r"})
				return err
			}, "Error 102: invalid channel value, cannot be empty"},
			{"response no request id", func() error {
				_, err := raw.SendResponse(ctx, &pb.Response{ClientID: "c", ReplyChannel: "_INBOX.nobody"})
				return err
			}, "Error 117: invalid request id, cannot be empty"},
			{"response nobody waits", func() error {
				_, err := raw.SendResponse(ctx, &pb.Response{ClientID: "c", ReplyChannel: "_INBOX.nobody", RequestID: "r", Executed: true})
				return err
			}, ""},
		}
		for _, tc := range unary {
			err := tc.call()
			if tc.want == "" {
				if err != nil {
					t.Errorf("%s: %v, want success", tc.name, err)
				}
				continue
			}
			if st, _ := status.FromError(err); st.Code() != codes.Internal || st.Message() != tc.want {
				t.Errorf("%s: got %v, want Internal %q", tc.name, err, tc.want)
			}
		}

		subs := []struct {
			name string
			req  *pb.Subscribe
			want string
		}{
			{"undefined type", &pb.Subscribe{ClientID: "c", Channel: ch}, "Error 207: invalid subscribe type"},
			{"queries on events", &pb.Subscribe{SubscribeTypeData: pb.Subscribe_Queries, ClientID: "c", Channel: ch}, "Error 207: invalid subscribe type"},
			{"no client", &pb.Subscribe{SubscribeTypeData: pb.Subscribe_Events, Channel: ch}, "Error 101: invalid clientID value, cannot be empty"},
			{"no channel", &pb.Subscribe{SubscribeTypeData: pb.Subscribe_EventsStore, ClientID: "c", EventsStoreTypeData: pb.Subscribe_StartFromFirst}, "Error 102: invalid channel value, cannot be empty"},
			{"store params on events", &pb.Subscribe{SubscribeTypeData: pb.Subscribe_Events, ClientID: "c", Channel: ch, EventsStoreTypeData: pb.Subscribe_StartFromFirst}, "Error 118: event store parameters were set but subscribe type is not event store"},
			{"store no start policy", &pb.Subscribe{SubscribeTypeData: pb.Subscribe_EventsStore, ClientID: "c", Channel: ch}, "Error 111: invalid subscription type, cannot be undefined or 0"},
			{"store wildcard", &pb.Subscribe{SubscribeTypeData: pb.Subscribe_EventsStore, ClientID: "c", Channel: ch + ".>", EventsStoreTypeData: pb.Subscribe_StartFromFirst}, "Error 107: invalid channel value, no wildcards are allowed"},
		}
		for _, tc := range subs {
			stream, err := raw.SubscribeToEvents(ctx, tc.req)
			if err == nil {
				_, err = stream.Recv()
			}
			if st, _ := status.FromError(err); st.Code() != codes.Internal || st.Message() != tc.want {
				t.Errorf("subscribe %s: got %v, want Internal %q", tc.name, err, tc.want)
			}
		}
		stream, err := raw.SubscribeToRequests(ctx, &pb.Subscribe{SubscribeTypeData: pb.Subscribe_Events, ClientID: "c", Channel: ch})
		if err == nil {
			_, err = stream.Recv()
		}
		if st, _ := status.FromError(err); st.Code() != codes.Internal || st.Message() != "Error 207: invalid subscribe type" {
			t.Errorf("subscribe to requests with events type: %v", err)
		}
	})
}

// psResponder answers every query on ch it receives with answer, after
// delay, and records what it received and what each answer's Send returned.
type psResponder struct {
	mu      sync.Mutex
	got     []*kubemq.QueryReceive
	sendErr []error
}

func (r *psResponder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

func psRespond(t *testing.T, c *kubemq.Client, ch, group string, answer func(q *kubemq.QueryReceive) *kubemq.Response) *psResponder {
	t.Helper()
	ctx := psCtx(t)
	errCh := make(chan error, 4)
	queries, err := c.SubscribeToQueries(ctx, ch, group, errCh)
	if err != nil {
		t.Fatalf("subscribe queries: %v", err)
	}
	r := &psResponder{}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-errCh:
			case q := <-queries:
				r.mu.Lock()
				r.got = append(r.got, q)
				r.mu.Unlock()
				resp := answer(q)
				if resp == nil {
					continue
				}
				err := resp.Send(ctx)
				r.mu.Lock()
				r.sendErr = append(r.sendErr, err)
				r.mu.Unlock()
			}
		}
	}()
	return r
}

func psAnswer(c *kubemq.Client, body string) func(*kubemq.QueryReceive) *kubemq.Response {
	return func(q *kubemq.QueryReceive) *kubemq.Response {
		return c.NewResponse().SetRequestId(q.Id).SetResponseTo(q.ResponseTo).SetBody([]byte(body)).SetExecutedAt(time.Now())
	}
}

func TestQueriesGroupAnsweredOnce(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		ch := channel(t, "q")
		c1, c2 := psClient(t, tg, "r1"), psClient(t, tg, "r2")
		r1 := psRespond(t, c1, ch, "inferq", psAnswer(c1, "r1"))
		r2 := psRespond(t, c2, ch, "inferq", psAnswer(c2, "r2"))
		psSettle(t, tg, ch, 2)
		req := psClient(t, tg, "requester")
		const n = 20
		for i := range n {
			res, err := req.NewQuery().SetChannel(ch).SetBody([]byte(strconv.Itoa(i))).SetTimeout(5 * time.Second).Send(psCtx(t))
			if err != nil {
				t.Fatalf("query %d: %v", i, err)
			}
			if !res.Executed || (string(res.Body) != "r1" && string(res.Body) != "r2") {
				t.Fatalf("query %d: %+v", i, res)
			}
		}
		if r1.count()+r2.count() != n || r1.count() == 0 || r2.count() == 0 {
			t.Errorf("group members received %d and %d queries, want %d in all, split", r1.count(), r2.count(), n)
		}
	})
}

func TestQueriesWithoutGroupFirstAnswerWins(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		ch := channel(t, "q")
		fast, slow := psClient(t, tg, "fast"), psClient(t, tg, "slow")
		rf := psRespond(t, fast, ch, "", psAnswer(fast, "fast"))
		// The slow responder answers once the requester has its answer.
		answered := make(chan struct{})
		rs := psRespond(t, slow, ch, "", func(q *kubemq.QueryReceive) *kubemq.Response {
			select {
			case <-answered:
			case <-time.After(5 * time.Second):
			}
			return psAnswer(slow, "slow")(q)
		})
		psSettle(t, tg, ch, 2)
		res, err := psClient(t, tg, "requester").NewQuery().SetChannel(ch).SetBody([]byte("q")).SetTimeout(5 * time.Second).Send(psCtx(t))
		close(answered)
		if err != nil {
			t.Fatalf("query: %v", err)
		}
		if string(res.Body) != "fast" {
			t.Errorf("answer %q, want the first one, %q", res.Body, "fast")
		}
		waitFor(t, 5*time.Second, "late answer sent", func() bool {
			rs.mu.Lock()
			defer rs.mu.Unlock()
			return len(rs.sendErr) > 0
		})
		if rf.count() != 1 || rs.count() != 1 {
			t.Errorf("responders got %d and %d queries, want 1 each", rf.count(), rs.count())
		}
		rs.mu.Lock()
		defer rs.mu.Unlock()
		if err := rs.sendErr[0]; err != nil {
			t.Errorf("late answer: %v, want it dropped without an error", err)
		}
	})
}

func TestQueriesTimeout(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		const want = "rpc error: code = Internal desc = Error 301: timeout for request message"
		req := psClient(t, tg, "requester")
		silentCh := channel(t, "q")
		psRespond(t, psClient(t, tg, "silent"), silentCh, "", func(*kubemq.QueryReceive) *kubemq.Response { return nil })
		psSettle(t, tg, silentCh, 1)
		for name, ch := range map[string]string{"no responder": channel(t, "q"), "no answer": silentCh} {
			start := time.Now()
			res, err := req.NewQuery().SetChannel(ch).SetBody([]byte("q")).SetTimeout(300 * time.Millisecond).Send(psCtx(t))
			if err == nil || err.Error() != want {
				t.Errorf("%s: got %v, %+v; want error %q", name, err, res, want)
			}
			// With no responder at all the real broker may fail at once (NATS
			// "no responders"); the embedded one waits. Only a silent
			// responder surely makes the requester wait its whole timeout.
			if d := time.Since(start); name == "no answer" && d < 250*time.Millisecond {
				t.Errorf("%s: failed after %v, before its timeout", name, d)
			}
			cmd, err := req.NewCommand().SetChannel(ch).SetBody([]byte("c")).SetTimeout(100 * time.Millisecond).Send(psCtx(t))
			if err == nil || err.Error() != want {
				t.Errorf("%s command: got %v, %+v; want error %q", name, err, cmd, want)
			}
		}
	})
}

func TestQueryResponseFields(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		ch := channel(t, "q")
		resp := psClient(t, tg, "responder")
		executedAt := time.Unix(1_700_000_000, 0)
		var mu sync.Mutex
		var seen *kubemq.QueryReceive
		psRespond(t, resp, ch, "", func(q *kubemq.QueryReceive) *kubemq.Response {
			mu.Lock()
			seen = q
			mu.Unlock()
			r := resp.NewResponse().SetRequestId(q.Id).SetResponseTo(q.ResponseTo).
				SetMetadata("meta-" + q.Metadata).SetBody(append([]byte("re:"), q.Body...)).
				SetTags(map[string]string{"k": q.Tags["k"] + "!"}).SetExecutedAt(executedAt)
			if q.Metadata == "fail" {
				r.SetError(fmt.Errorf("model exploded"))
			}
			return r
		})
		psSettle(t, tg, ch, 1)
		req := psClient(t, tg, "requester")
		res, err := req.NewQuery().SetId("query-1").SetChannel(ch).SetMetadata("m").SetBody([]byte("b")).
			AddTag("k", "v").SetTimeout(5 * time.Second).Send(psCtx(t))
		if err != nil {
			t.Fatalf("query: %v", err)
		}
		if res.QueryId != "query-1" || !res.Executed || res.Metadata != "meta-m" || string(res.Body) != "re:b" ||
			res.Tags["k"] != "v!" || res.ResponseClientId != "responder" || res.Error != "" || res.CacheHit ||
			!res.ExecutedAt.Equal(executedAt) {
			t.Errorf("response %+v", res)
		}
		mu.Lock()
		q := seen
		mu.Unlock()
		if q.Id != "query-1" || q.ClientId != "requester" || q.Channel != ch || q.Metadata != "m" ||
			string(q.Body) != "b" || q.Tags["k"] != "v" || q.ResponseTo == "" {
			t.Errorf("query as received %+v", q)
		}

		res, err = req.NewQuery().SetChannel(ch).SetMetadata("fail").SetTimeout(5 * time.Second).Send(psCtx(t))
		if err != nil {
			t.Fatalf("failing query: %v", err)
		}
		if res.Executed || res.Error != "model exploded" || res.QueryId == "" {
			t.Errorf("failed response %+v", res)
		}
	})
}

func TestCommandsRoundTrip(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		ch := channel(t, "cmd")
		resp := psClient(t, tg, "responder")
		ctx := psCtx(t)
		errCh := make(chan error, 4)
		cmds, err := resp.SubscribeToCommands(ctx, ch, "g", errCh)
		if err != nil {
			t.Fatalf("subscribe commands: %v", err)
		}
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case c := <-cmds:
					r := resp.NewResponse().SetRequestId(c.Id).SetResponseTo(c.ResponseTo).SetBody([]byte("dropped for commands"))
					if string(c.Body) == "fail" {
						r.SetError(fmt.Errorf("refused"))
					}
					_ = r.Send(ctx)
				}
			}
		}()
		psSettle(t, tg, ch, 1)
		req := psClient(t, tg, "requester")
		res, err := req.NewCommand().SetChannel(ch).SetBody([]byte("ok")).SetTimeout(5 * time.Second).Send(psCtx(t))
		if err != nil || !res.Executed || res.Error != "" || res.CommandId == "" || res.ResponseClientId != "responder" {
			t.Errorf("command: %v %+v", err, res)
		}
		res, err = req.NewCommand().SetChannel(ch).SetBody([]byte("fail")).SetTimeout(5 * time.Second).Send(psCtx(t))
		if err != nil || res.Executed || res.Error != "refused" {
			t.Errorf("failing command: %v %+v", err, res)
		}
		// A query on the same channel does not reach a commands subscriber.
		_, err = req.NewQuery().SetChannel(ch).SetBody([]byte("q")).SetTimeout(200 * time.Millisecond).Send(psCtx(t))
		if err == nil || !strings.Contains(err.Error(), "Error 301") {
			t.Errorf("query to a commands channel: %v", err)
		}
	})
}
