package broker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferq/inferq/broker/brokertest"
	pb "github.com/kubemq-io/protobuf/go"
)

// Tests of StreamQueueMessage on the embedded broker only, with short
// seconds; the conformance rows are in conformance_streamqueue_test.go.

// sqFastServer is an embedded broker with 1 ms "seconds" and wait floor,
// so that waits and visibility timers in whole seconds run fast.
func sqFastServer(t testing.TB) *brokertest.Server {
	opts := fastOpts
	opts.PollWaitFloor = time.Millisecond
	opts.SecondLength = time.Millisecond
	opts.DefaultMaxReceiveCount = 4
	return brokertest.NewServer(t, opts)
}

// TestStreamQueueExtendWithoutMessage: a visibility change before any
// message arrives starts the timer all the same (as on KubeMQ): when it
// fires the stream gets Error 129, answering the visibility change, and
// ends, and the message sent afterwards is not held by anyone.
func TestStreamQueueExtendWithoutMessage(t *testing.T) {
	t.Parallel()
	srv := sqFastServer(t)
	raw := rawClient(t, srv.Addr)
	const ch = "sq.extend.nomsg"
	q := sqOpen(t, raw)
	if err := q.s.Send(sqRecvReq("recv", ch, 3600, 0)); err != nil {
		t.Fatal(err)
	}
	extend := &pb.StreamQueueMessagesRequest{RequestID: "ext", ClientID: "c", StreamRequestTypeData: sqExtend, VisibilitySeconds: 20}
	q.wantOK("extend with nothing held", extend)
	q.wantErr("expiry", q.next("expiry"), extend, sqErrVisibility)
	q.wantEnd("after the expiry")
	sqSend(t, raw, ch, "later", nil)
	waitFor(t, 2*time.Second, "the message to wait in the queue", func() bool {
		st := srv.QueueState(ch)
		return len(st.Waiting) == 1 && st.InFlight == 0
	})
}

// TestStreamQueueCloseWhileWaiting: a stream closed while its receive
// waits takes nothing: what arrives afterwards is there for the next
// receive, its receive count untouched.
func TestStreamQueueCloseWhileWaiting(t *testing.T) {
	t.Parallel()
	srv := sqFastServer(t)
	raw := rawClient(t, srv.Addr)
	const ch = "sq.close.waiting"
	q := sqOpen(t, raw)
	if err := q.s.Send(sqRecvReq("recv", ch, 3600, 0)); err != nil {
		t.Fatal(err)
	}
	q.cancel()
	time.Sleep(20 * time.Millisecond)
	id := sqSend(t, raw, ch, "w", nil)
	q2, m := sqReceiveOne(t, raw, ch, 30000)
	sqWantMessage(t, "delivery after the waiting stream closed", m, id, "w", 1)
	q2.wantOK("ack", sqAckReq(sqAck, m))
	q2.wantEnd("after the ack")
	if n := srv.InFlight(ch); n != 0 {
		t.Errorf("in flight %d, want 0", n)
	}
}

// TestStreamQueueExpiryToDeadLetter: visibility expiries count as receives
// up to the dead letter queue, like rejects.
func TestStreamQueueExpiryToDeadLetter(t *testing.T) {
	t.Parallel()
	srv := sqFastServer(t)
	raw := rawClient(t, srv.Addr)
	const ch, dlq = "sq.exp.dl", "sq.exp.dl.dead"
	id := sqSend(t, raw, ch, "e", &pb.QueueMessagePolicy{MaxReceiveCount: 3, MaxReceiveQueue: dlq})
	for rc := int32(1); rc <= 3; rc++ {
		q := sqOpen(t, raw)
		req := sqRecvReq(fmt.Sprint("r", rc), ch, 1000, 5)
		r := q.call("receive", req)
		if r.Message == nil {
			t.Fatalf("receive %d: %+v", rc, r)
		}
		sqWantMessage(t, "delivery", r.Message, id, "e", rc)
		q.wantErr("expiry", q.next("expiry"), req, sqErrVisibility)
		q.wantEnd("after the expiry")
	}
	q, m := sqReceiveOne(t, raw, dlq, 30000)
	sqWantMessage(t, "dead letter", m, id, "e", 1)
	q.wantOK("ack", sqAckReq(sqAck, m))
	if st := srv.QueueState(ch); len(st.Waiting) != 0 || st.InFlight != 0 {
		t.Errorf("origin queue %+v, want empty", st)
	}
}

// TestStreamQueueParallelStreams: streams receiving in parallel from one
// queue get each message once.
func TestStreamQueueParallelStreams(t *testing.T) {
	t.Parallel()
	srv := sqFastServer(t)
	raw := rawClient(t, srv.Addr)
	const ch, n, workers = "sq.parallel", 200, 8
	for i := range n {
		sqSend(t, raw, ch, fmt.Sprint(i), nil)
	}
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		done atomic.Int64
		wg   sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for done.Load() < n {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				s, err := raw.StreamQueueMessage(ctx)
				if err != nil {
					cancel()
					t.Error(err)
					return
				}
				// A visibility of 30 s (of 1 ms "seconds" here) that no
				// loaded machine reaches.
				r := sqExchange(s, sqRecvReq("r", ch, 20, 30000))
				if r != nil && r.Message != nil {
					mu.Lock()
					seen[string(r.Message.Body)]++
					mu.Unlock()
					if a := sqExchange(s, sqAckReq(sqAck, r.Message)); a == nil || a.IsError {
						t.Errorf("ack: %+v", a)
					}
					done.Add(1)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Errorf("%d distinct messages received, want %d", len(seen), n)
	}
	for body, k := range seen {
		if k != 1 {
			t.Errorf("message %s received %d times", body, k)
		}
	}
	if st := srv.QueueState(ch); len(st.Waiting) != 0 || st.InFlight != 0 {
		t.Errorf("queue %+v, want empty", st)
	}
}

// sqExchange sends req on s and returns the next response, or nil.
func sqExchange(s pb.Kubemq_StreamQueueMessageClient, req *pb.StreamQueueMessagesRequest) *pb.StreamQueueMessagesResponse {
	if err := s.Send(req); err != nil {
		return nil
	}
	r, err := s.Recv()
	if err != nil {
		return nil
	}
	return r
}

// FuzzStreamQueueRequests drives StreamQueueMessage with arbitrary request
// fields: a send, a receive, then three more requests of any type naming
// the delivered message's sequence (shifted by seqDelta). Whatever the
// fields, every answer is a response or a KubeMQ error text, and once the
// stream is gone nothing stays in flight.
func FuzzStreamQueueRequests(f *testing.F) {
	f.Add("fz.sq", "c", int32(1), int32(2), int32(3), int32(4), int32(5), int32(1), uint64(0), "fz.other", []byte("x"), int32(0), false)
	f.Add("fz.sq", "c", int32(1), int32(3), int32(2), int32(2), int32(0), int32(0), uint64(1), "", []byte("x"), int32(1), true)
	f.Add("fz.sq", "", int32(0), int32(6), int32(5), int32(9), int32(-1), int32(-1), uint64(0), "a b", []byte(nil), int32(-1), false)
	f.Add("a*b", "c", int32(1), int32(4), int32(4), int32(2), int32(50000), int32(4000), uint64(7), "fz.x.", []byte("y"), int32(2000), true)
	f.Add("fz.sq", "c", int32(1), int32(6), int32(1), int32(3), int32(3), int32(2), uint64(0), "fz.mod", []byte("z"), int32(2), false)
	srv := sqFastServer(f)
	raw := rawClient(f, srv.Addr)
	var run atomic.Int64
	f.Fuzz(func(t *testing.T, channel, clientID string, t0, t1, t2, t3, vis, wait int32, seqDelta uint64,
		other string, body []byte, maxRecv int32, closeSend bool) {
		// Bounded timers: the server honours long ones.
		vis %= 100
		wait %= 100
		if channel != "" {
			channel = fmt.Sprintf("%s.%d", channel, run.Add(1))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := raw.SendQueueMessage(ctx, &pb.QueueMessage{ClientID: clientID, Channel: channel, Body: body,
			Policy: &pb.QueueMessagePolicy{MaxReceiveCount: maxRecv, MaxReceiveQueue: other}}); err != nil {
			t.Fatalf("send: %v", err)
		}
		sctx, scancel := context.WithCancel(ctx)
		defer scancel()
		s, err := raw.StreamQueueMessage(sctx)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		resps := make(chan *pb.StreamQueueMessagesResponse, 16)
		go func() {
			defer close(resps)
			for {
				r, err := s.Recv()
				if err != nil {
					return
				}
				resps <- r
			}
		}()
		_ = s.Send(&pb.StreamQueueMessagesRequest{RequestID: "r0", ClientID: clientID, StreamRequestTypeData: pb.StreamRequestType(t0),
			Channel: channel, VisibilitySeconds: vis, WaitTimeSeconds: wait})
		var seq uint64
		got, ended := 0, false
		// The receive's answer first, or the stream's end.
		select {
		case r, ok := <-resps:
			ended = !ok
			if ok {
				got++
				sqFuzzCheck(t, r)
				if r.Message != nil {
					seq = r.Message.Attributes.Sequence
				}
			}
		case <-time.After(2 * time.Second):
		}
		for i, typ := range []int32{t1, t2, t3} {
			_ = s.Send(&pb.StreamQueueMessagesRequest{RequestID: fmt.Sprint("r", i+1), ClientID: clientID,
				StreamRequestTypeData: pb.StreamRequestType(typ), Channel: other, VisibilitySeconds: vis,
				WaitTimeSeconds: wait, RefSequence: seq + seqDelta,
				ModifiedMessage: &pb.QueueMessage{ClientID: clientID, Channel: other, Body: body}})
		}
		if closeSend {
			_ = s.CloseSend()
		}
		deadline := time.After(2 * time.Second)
		for !ended && got < 4 {
			select {
			case r, ok := <-resps:
				if !ok {
					ended = true
					break
				}
				got++
				sqFuzzCheck(t, r)
			case <-deadline:
				ended = true
			}
		}
		scancel()
		for _, name := range []string{channel, other} {
			if validQueueNameForTest(name) {
				waitFor(t, 3*time.Second, "held messages to come back to "+name, func() bool { return srv.InFlight(name) == 0 })
			}
		}
	})
}

// sqFuzzCheck: an answer is a KubeMQ error, a plain answer, or a delivery
// answering a receive.
func sqFuzzCheck(t *testing.T, r *pb.StreamQueueMessagesResponse) {
	t.Helper()
	switch {
	case r.IsError && !strings.HasPrefix(r.Error, "Error 1"):
		t.Errorf("error %q is not a KubeMQ error text", r.Error)
	case r.IsError && r.Message != nil:
		t.Errorf("error %q with a message", r.Error)
	case r.Message != nil && r.StreamRequestTypeData != sqReceive:
		t.Errorf("message delivered in an answer of type %v", r.StreamRequestTypeData)
	case r.RequestID == "":
		t.Errorf("answer without a request id: %+v", r)
	}
}
