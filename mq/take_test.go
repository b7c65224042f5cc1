package mq

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	pb "github.com/kubemq-io/protobuf/go"
)

// TakeWhile removes the oldest messages only while take accepts those very
// messages: a refused head stays, accepted ones go (and only they), and a
// message that differs from the one peeked (take accepts the peek and
// refuses the message received) is written back, at the tail, instead of
// being consumed.
func TestTakeWhile(t *testing.T) {
	for _, tg := range targets(t, broker.Options{SecondLength: 50 * time.Millisecond}) {
		t.Run(tg.name, func(t *testing.T) {
			c := dial(t, tg)
			ctx := context.Background()
			ch := chanName(t)
			second := 50 * time.Millisecond
			if tg.srv == nil {
				second = time.Second
			}
			body := func(m *Message) string {
				if m == nil {
					return "<none>"
				}
				return string(m.Body)
			}
			waiting := func() []string {
				t.Helper()
				msgs, err := c.Peek(ctx, ch, 10, second)
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, m := range msgs {
					out = append(out, string(m.Body))
				}
				return out
			}
			send := func(bodies ...string) {
				t.Helper()
				for _, b := range bodies {
					if err := c.Sender().Send(ctx, OutMessage{Channel: ch, Body: []byte(b)}); err != nil {
						t.Fatal(err)
					}
				}
			}
			takeAll := func(*Message) bool { return true }

			if m, n, err := c.TakeWhile(ctx, ch, second, 8, takeAll); err != nil || m != nil || n != 0 {
				t.Fatalf("empty channel: %s %d %v, want nothing", body(m), n, err)
			}
			send("a", "b")
			refuse := func(*Message) bool { return false }
			if m, n, err := c.TakeWhile(ctx, ch, second, 8, refuse); err != nil || body(m) != "a" || n != 0 {
				t.Fatalf("refused head: %s %d %v, want a left", body(m), n, err)
			}
			if got := waiting(); len(got) != 2 || got[0] != "a" {
				t.Fatalf("after a refused head the channel holds %v, want [a b]", got)
			}
			// Accepted at the peek, refused once received: it goes back,
			// and the next head (b, refused) stops the call.
			calls := 0
			changed := func(*Message) bool { calls++; return calls == 1 }
			if m, n, err := c.TakeWhile(ctx, ch, second, 8, changed); err != nil || body(m) != "b" || n != 0 || calls != 3 {
				t.Fatalf("head refused once received: %s %d %v (take asked %d times), want a given back and b at the head", body(m), n, err, calls)
			}
			if got := waiting(); len(got) != 2 || !(got[0] == "b" && got[1] == "a") {
				t.Fatalf("after a given-back head the channel holds %v, want [b a] (back at the tail)", got)
			}
			if m, n, err := c.TakeWhile(ctx, ch, second, 1, takeAll); err != nil || m != nil || n != 1 {
				t.Fatalf("at most one: %s %d %v, want one removed", body(m), n, err)
			}
			if got := waiting(); len(got) != 1 || got[0] != "a" {
				t.Fatalf("after removing the head the channel holds %v, want [a]", got)
			}
			send("c", "stop")
			notStop := func(m *Message) bool { return string(m.Body) != "stop" }
			if m, n, err := c.TakeWhile(ctx, ch, second, 8, notStop); err != nil || body(m) != "stop" || n != 2 {
				t.Fatalf("run of heads: %s %d %v, want a and c removed, stop at the head", body(m), n, err)
			}
			if got := waiting(); len(got) != 1 || got[0] != "stop" {
				t.Fatalf("the channel holds %v, want [stop]", got)
			}
		})
	}
}

// A peek can show a later message while an older one is held by a reader's
// peek that is closing (KUBEMQ.md fact 48). TakeWhile stops at a refused head
// only once every older sequence is accounted for: here the broker hides the
// head from two peeks, and the call peeks again until it sees the old record,
// removes it, and stops at the new one. When the head stays hidden, it gives
// up after its bounded pauses.
func TestTakeWhileWaitsOutAHiddenHead(t *testing.T) {
	for _, tc := range []struct {
		name     string
		hide     int64
		wantHead string
		wantN    int
	}{
		{name: "hidden from two peeks", hide: 2, wantHead: "new", wantN: 1},
		{name: "hidden for good", hide: 1 << 30, wantHead: "new", wantN: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := broker.New(broker.Options{})
			t.Cleanup(func() { _ = b.Close() })
			hb := &hidingBroker{Server: b}
			c := dialCfg(t, Config{Address: serveKubemq(t, hb)})
			ctx := context.Background()
			ch := chanName(t)
			for _, body := range []string{"old", "new"} {
				if err := c.Sender().Send(ctx, OutMessage{Channel: ch, Body: []byte(body)}); err != nil {
					t.Fatal(err)
				}
			}
			hb.hide.Store(tc.hide)
			start := time.Now()
			m, n, err := c.TakeWhile(ctx, ch, time.Second, 8, func(m *Message) bool { return string(m.Body) == "old" })
			if err != nil || m == nil || string(m.Body) != tc.wantHead || n != tc.wantN {
				t.Fatalf("TakeWhile = %v, %d, %v; want head %q and %d removed", m, n, err, tc.wantHead, tc.wantN)
			}
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("TakeWhile took %v, want its pauses bounded (about a second)", took)
			}
		})
	}
}

// hidingBroker is the embedded broker whose next hide peeks show the
// channel without its oldest message, as a peek does on KubeMQ while a
// reader's closing peek still holds it.
type hidingBroker struct {
	*broker.Server
	hide atomic.Int64
}

func (h *hidingBroker) ReceiveQueueMessages(ctx context.Context, req *pb.ReceiveQueueMessagesRequest) (*pb.ReceiveQueueMessagesResponse, error) {
	if !req.IsPeak || h.hide.Add(-1) < 0 {
		return h.Server.ReceiveQueueMessages(ctx, req)
	}
	wider := &pb.ReceiveQueueMessagesRequest{RequestID: req.RequestID, ClientID: req.ClientID, Channel: req.Channel,
		MaxNumberOfMessages: req.MaxNumberOfMessages + 1, WaitTimeSeconds: req.WaitTimeSeconds, IsPeak: true}
	resp, err := h.Server.ReceiveQueueMessages(ctx, wider)
	if err != nil || len(resp.Messages) == 0 {
		return resp, err
	}
	resp.Messages = resp.Messages[1:]
	resp.MessagesReceived = int32(len(resp.Messages))
	return resp, nil
}
