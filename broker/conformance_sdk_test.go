package broker_test

// Conformance rows for rules that clients other than kubemq-go meet first
// (issue 14, docs/KUBEMQ.md traps 15 and 18): events store client ids,
// the empty queue batch, and Ping. Raw gRPC, since kubemq-go v1.9.0
// swallows a refused events store subscription.

import (
	"context"
	"testing"
	"time"

	pb "github.com/kubemq-io/protobuf/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	sdkErrClientID  = "stan: invalid clientID: only alphanumeric and `-` or `_` characters allowed"
	sdkErrClientDup = "stan: clientID already registered"
)

// sdkStoreSub opens an events store subscription and waits for its first
// event or its error. The stream stays open until the returned cancel (or
// the test's end).
func sdkStoreSub(t *testing.T, raw pb.KubemqClient, req *pb.Subscribe) (*pb.EventReceive, error, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req.SubscribeTypeData = pb.Subscribe_EventsStore
	stream, err := raw.SubscribeToEvents(ctx, req)
	if err != nil {
		return nil, err, cancel
	}
	type got struct {
		ev  *pb.EventReceive
		err error
	}
	first := make(chan got, 1)
	go func() {
		ev, err := stream.Recv()
		first <- got{ev, err}
	}()
	select {
	case g := <-first:
		return g.ev, g.err, cancel
	case <-time.After(10 * time.Second):
		t.Fatalf("subscribe %s on %s: neither an event nor an error in 10 s", req.ClientID, req.Channel)
		return nil, nil, cancel
	}
}

// sdkStore sends one stored event to ch.
func sdkStore(t *testing.T, raw pb.KubemqClient, ch string) {
	t.Helper()
	res, err := raw.SendEvent(psCtx(t), &pb.Event{ClientID: psID("send"), Channel: ch, Body: []byte("x"), Store: true})
	if err != nil || !res.Sent {
		t.Fatalf("send stored event to %s: %v %v", ch, res, err)
	}
}

// sdkWantInternal fails unless err is codes.Internal with text want.
func sdkWantInternal(t *testing.T, what string, err error, want string) {
	t.Helper()
	if st, _ := status.FromError(err); st.Code() != codes.Internal || st.Message() != want {
		t.Errorf("%s: got %v, want Internal %q", what, err, want)
	}
}

// TestEventsStoreClientIDCharacters: an events store subscription's client
// id may hold only [A-Za-z0-9_-]; anything else is refused before the
// channel and start policy are checked (only an empty id comes first).
// Events subscriptions and stored sends take any id.
func TestEventsStoreClientIDCharacters(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		raw := psRaw(t, tg)
		ch := channel(t, "esid")
		sdkStore(t, raw, ch)
		first := pb.Subscribe_StartFromFirst
		for _, bad := range []string{".", ":", " ", "/", "@", "+", "*", "é"} {
			id := psID("a") + bad + "b"
			_, err, _ := sdkStoreSub(t, raw, &pb.Subscribe{ClientID: id, Channel: ch, EventsStoreTypeData: first})
			sdkWantInternal(t, "client id "+id, err, sdkErrClientID)
		}
		_, err, _ := sdkStoreSub(t, raw, &pb.Subscribe{ClientID: "a.b", Channel: ch + ".", EventsStoreTypeData: first})
		sdkWantInternal(t, "bad id and trailing dot", err, sdkErrClientID)
		_, err, _ = sdkStoreSub(t, raw, &pb.Subscribe{ClientID: "a.b", Channel: ch})
		sdkWantInternal(t, "bad id and no start policy", err, sdkErrClientID)
		_, err, _ = sdkStoreSub(t, raw, &pb.Subscribe{Channel: ch + ".", EventsStoreTypeData: first})
		sdkWantInternal(t, "no id and trailing dot", err, "Error 101: invalid clientID value, cannot be empty")

		ev, err, _ := sdkStoreSub(t, raw, &pb.Subscribe{ClientID: psID("Ok_-9"), Channel: ch, EventsStoreTypeData: first})
		if err != nil || ev.Sequence != 1 {
			t.Errorf("valid client id: got %v, %v; want event 1", ev, err)
		}
		res, err := raw.SendEvent(psCtx(t), &pb.Event{ClientID: "a.b:c/d e", Channel: ch, Body: []byte("x"), Store: true})
		if err != nil || !res.Sent {
			t.Errorf("stored send with a dotted client id: %v %v, want sent", res, err)
		}
	})
}

// TestEventsStoreClientIDOnePerID: one open events store subscription per
// client id, across channels and groups, refused before any other check
// but Error 101; events subscriptions and sends may share the id; once the
// first subscription ends the id is free again.
func TestEventsStoreClientIDOnePerID(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		raw := psRaw(t, tg)
		ch, other := channel(t, "esdup"), channel(t, "esdup2")
		sdkStore(t, raw, ch)
		sdkStore(t, raw, other)
		first := pb.Subscribe_StartFromFirst
		id := psID("dup")
		ev, err, cancelFirst := sdkStoreSub(t, raw, &pb.Subscribe{ClientID: id, Channel: ch, EventsStoreTypeData: first})
		if err != nil || ev.Sequence != 1 {
			t.Fatalf("first subscription: %v, %v", ev, err)
		}
		for _, tc := range []struct {
			name string
			req  *pb.Subscribe
		}{
			{"same channel", &pb.Subscribe{ClientID: id, Channel: ch, EventsStoreTypeData: first}},
			{"other channel", &pb.Subscribe{ClientID: id, Channel: other, EventsStoreTypeData: first}},
			{"with a group", &pb.Subscribe{ClientID: id, Channel: ch, Group: "g", EventsStoreTypeData: first}},
			{"and a trailing dot", &pb.Subscribe{ClientID: id, Channel: ch + ".", EventsStoreTypeData: first}},
			{"and no start policy", &pb.Subscribe{ClientID: id, Channel: ch}},
		} {
			_, err, _ := sdkStoreSub(t, raw, tc.req)
			sdkWantInternal(t, "second subscription, "+tc.name, err, sdkErrClientDup)
		}
		res, err := raw.SendEvent(psCtx(t), &pb.Event{ClientID: id, Channel: ch, Body: []byte("x"), Store: true})
		if err != nil || !res.Sent {
			t.Errorf("stored send with the subscribed id: %v %v, want sent", res, err)
		}

		cancelFirst()
		// The broker notices the end of the stream on its own time: try
		// until the id is taken again.
		deadline := time.Now().Add(10 * time.Second)
		for {
			ev, err, cancel := sdkStoreSub(t, raw, &pb.Subscribe{ClientID: id, Channel: other, EventsStoreTypeData: first})
			cancel()
			if err == nil && ev.Sequence == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("client id still refused 10 s after its subscription ended: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// TestQueueEmptyBatch: a batch without messages is refused with
// codes.Unknown "empty messages batch".
func TestQueueEmptyBatch(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		raw := psRaw(t, tg)
		for _, req := range []*pb.QueueMessagesBatchRequest{{}, {BatchID: psID("b"), Messages: []*pb.QueueMessage{}}} {
			_, err := raw.SendQueueMessagesBatch(psCtx(t), req)
			if st, _ := status.FromError(err); st.Code() != codes.Unknown || st.Message() != "empty messages batch" {
				t.Errorf("empty batch %q: got %v, want Unknown %q", req.BatchID, err, "empty messages batch")
			}
		}
	})
}

// TestPingStartAndUptime: Ping reports the server's start (Unix seconds)
// and its uptime in seconds, which add up to now.
func TestPingStartAndUptime(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		before := time.Now().Unix()
		p, err := psRaw(t, tg).Ping(psCtx(t), &pb.Empty{})
		after := time.Now().Unix()
		if err != nil {
			t.Fatalf("ping: %v", err)
		}
		if p.ServerStartTime <= 0 || p.ServerStartTime > after {
			t.Errorf("ServerStartTime %d, want a Unix time in the past (now %d)", p.ServerStartTime, after)
		}
		if p.ServerUpTimeSeconds < 0 {
			t.Errorf("ServerUpTimeSeconds %d, want >= 0", p.ServerUpTimeSeconds)
		}
		if end := p.ServerStartTime + p.ServerUpTimeSeconds; end < before-1 || end > after+1 {
			t.Errorf("start %d + uptime %d = %d, want now (%d..%d)", p.ServerStartTime, p.ServerUpTimeSeconds, end, before, after)
		}
	})
}
