package broker_test

// Conformance rows for the legacy per-message queue stream,
// StreamQueueMessage (issue 14 item 1; docs/KUBEMQ.md trap 18): the only
// stream receive of kubemq-js 1.x and of the Java and C# v1 SDKs. Raw gRPC,
// so that the rows test the wire the way those SDKs use it; the semantics
// are the real broker's (pkg/client/queue.go of KubeMQ v2.4.0). Each row
// uses channels unique to the run, so that it also runs against a real
// KubeMQ (KUBEMQ_ADDRESS).

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/kubemq-io/kubemq-go"
	pb "github.com/kubemq-io/protobuf/go"
)

const (
	sqErrNoMessage   = "Error 138: no new message in queue, wait time expired"
	sqErrVisibility  = "Error 129: current visibility timer expired"
	sqErrAckSeq      = "Error 125: ack sequence cannot be 0 or negative"
	sqErrActive      = "Error 128: subscription to queue is already active"
	sqErrNoAck       = "Error 124: no active message to ack"
	sqErrNoSend      = "Error 126: no active message to send"
	sqErrNoReject    = "Error 137: no active message to reject"
	sqErrVisValue    = "Error 127: invalid visibility time, cannot be negative or exceed setting in kubemq config"
	sqErrType        = "Error 132: invalid stream queue messages request type"
	sqErrQueueMsg    = "Error 131: invalid queue message"
	sqErrClientID    = "Error 101: invalid clientID value, cannot be empty"
	sqErrQueueName   = "Error 120: invalid queue name value, cannot be empty, contains wildcards ,white spaces and end with dot"
	sqErrWait        = "Error 136: invalid wait timeout, value cannot be negative or exceed max wait timeout seconds setting in kubemq config"
	sqErrEmptyMsg    = "Error 110: invalid message, cannot be empty"
	sqResponseWithin = 15 * time.Second
)

const (
	sqReceive   = pb.StreamRequestType_ReceiveMessage
	sqAck       = pb.StreamRequestType_AckMessage
	sqReject    = pb.StreamRequestType_RejectMessage
	sqExtend    = pb.StreamRequestType_ModifyVisibility
	sqResend    = pb.StreamRequestType_ResendMessage
	sqSendModif = pb.StreamRequestType_SendModifiedMessage
)

// sqStream is one open StreamQueueMessage stream and what it answers.
type sqStream struct {
	t      *testing.T
	s      pb.Kubemq_StreamQueueMessageClient
	cancel context.CancelFunc
	resps  chan sqResp
}

type sqResp struct {
	r   *pb.StreamQueueMessagesResponse
	err error
}

// sqOpen opens a stream, cancelled at the end of the test at the latest.
func sqOpen(t *testing.T, raw pb.KubemqClient) *sqStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := raw.StreamQueueMessage(ctx)
	if err != nil {
		t.Fatalf("open StreamQueueMessage: %v", err)
	}
	q := &sqStream{t: t, s: s, cancel: cancel, resps: make(chan sqResp, 64)}
	go func() {
		for {
			r, err := s.Recv()
			select {
			case q.resps <- sqResp{r, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return q
}

// next is the stream's next response; the stream must not end first.
func (q *sqStream) next(what string) *pb.StreamQueueMessagesResponse {
	q.t.Helper()
	select {
	case r := <-q.resps:
		if r.err != nil {
			q.t.Fatalf("%s: the stream ended: %v", what, r.err)
		}
		return r.r
	case <-time.After(sqResponseWithin):
		q.t.Fatalf("%s: no response in %v", what, sqResponseWithin)
		return nil
	}
}

// call sends req and returns the next response.
func (q *sqStream) call(what string, req *pb.StreamQueueMessagesRequest) *pb.StreamQueueMessagesResponse {
	q.t.Helper()
	if err := q.s.Send(req); err != nil {
		q.t.Fatalf("%s: send: %v", what, err)
	}
	return q.next(what)
}

// wantOK fails unless r answers req without error and without a message.
func (q *sqStream) wantOK(what string, req *pb.StreamQueueMessagesRequest) {
	q.t.Helper()
	r := q.call(what, req)
	if r.IsError || r.Message != nil || r.RequestID != req.RequestID || r.StreamRequestTypeData != req.StreamRequestTypeData {
		q.t.Fatalf("%s: got %+v, want a plain answer to request %s of type %v", what, r, req.RequestID, req.StreamRequestTypeData)
	}
}

// wantAcked sends an ack and wants its plain answer, then the stream's
// end. KubeMQ v2.4.0 may end the stream without the answer, as its handler
// cancels the goroutine that forwards it (KUBEMQ.md fact 44): accepted, and
// logged, on a real broker only.
func (q *sqStream) wantAcked(what string, req *pb.StreamQueueMessagesRequest, real bool) {
	q.t.Helper()
	if err := q.s.Send(req); err != nil {
		q.t.Fatalf("%s: send: %v", what, err)
	}
	select {
	case r := <-q.resps:
		if r.err != nil {
			if real && errors.Is(r.err, io.EOF) {
				q.t.Logf("%s: the stream ended without the ack's answer (KUBEMQ.md fact 44)", what)
				return
			}
			q.t.Fatalf("%s: the stream ended: %v", what, r.err)
		}
		if r.r.IsError || r.r.Message != nil || r.r.RequestID != req.RequestID || r.r.StreamRequestTypeData != req.StreamRequestTypeData {
			q.t.Fatalf("%s: got %+v, want a plain answer to request %s of type %v", what, r.r, req.RequestID, req.StreamRequestTypeData)
		}
	case <-time.After(sqResponseWithin):
		q.t.Fatalf("%s: no response in %v", what, sqResponseWithin)
	}
	q.wantEnd("after " + what)
}

// wantErr fails unless r is the error text want for req.
func (q *sqStream) wantErr(what string, r *pb.StreamQueueMessagesResponse, req *pb.StreamQueueMessagesRequest, want string) {
	q.t.Helper()
	if !r.IsError || r.Error != want || r.Message != nil || r.StreamRequestTypeData != req.StreamRequestTypeData ||
		(req.RequestID != "" && r.RequestID != req.RequestID) || r.RequestID == "" {
		q.t.Errorf("%s: got %+v, want error %q answering request %q of type %v", what, r, want, req.RequestID, req.StreamRequestTypeData)
	}
}

// wantEnd fails unless the server ends the stream (with status OK) next.
func (q *sqStream) wantEnd(what string) {
	q.t.Helper()
	select {
	case r := <-q.resps:
		if !errors.Is(r.err, io.EOF) {
			q.t.Fatalf("%s: got %+v, %v; want the stream to end", what, r.r, r.err)
		}
	case <-time.After(sqResponseWithin):
		q.t.Fatalf("%s: the stream did not end in %v", what, sqResponseWithin)
	}
}

// sqRecvReq is a receive request.
func sqRecvReq(id, ch string, waitSec, visSec int32) *pb.StreamQueueMessagesRequest {
	return &pb.StreamQueueMessagesRequest{RequestID: id, ClientID: psID("sq"), StreamRequestTypeData: sqReceive,
		Channel: ch, WaitTimeSeconds: waitSec, VisibilitySeconds: visSec}
}

// sqReceiveOne opens a stream and receives one message from ch.
func sqReceiveOne(t *testing.T, raw pb.KubemqClient, ch string, visSec int32) (*sqStream, *pb.QueueMessage) {
	t.Helper()
	q := sqOpen(t, raw)
	req := sqRecvReq(psID("recv"), ch, 5, visSec)
	r := q.call("receive from "+ch, req)
	if r.IsError || r.Message == nil {
		t.Fatalf("receive from %s: got %+v, want a message", ch, r)
	}
	if r.RequestID != req.RequestID || r.StreamRequestTypeData != sqReceive {
		t.Errorf("receive from %s: answer to %q type %v, want to %q type %v", ch, r.RequestID, r.StreamRequestTypeData, req.RequestID, sqReceive)
	}
	if m := r.Message; m.Channel != ch || m.Attributes == nil || m.Attributes.Sequence == 0 {
		t.Fatalf("receive from %s: message %+v", ch, m)
	}
	return q, r.Message
}

// sqAckReq names m in an ack, reject or other settlement.
func sqAckReq(typ pb.StreamRequestType, m *pb.QueueMessage) *pb.StreamQueueMessagesRequest {
	return &pb.StreamQueueMessagesRequest{RequestID: psID("settle"), ClientID: m.ClientID, StreamRequestTypeData: typ,
		RefSequence: m.Attributes.Sequence}
}

// sqSend sends one message to ch and fails the test on any error.
func sqSend(t *testing.T, raw pb.KubemqClient, ch, body string, policy *pb.QueueMessagePolicy) string {
	t.Helper()
	res, err := raw.SendQueueMessage(psCtx(t), &pb.QueueMessage{ClientID: psID("sender"), Channel: ch, Body: []byte(body),
		Metadata: "md-" + body, Tags: map[string]string{"k": body}, Policy: policy})
	if err != nil || res.IsError {
		t.Fatalf("send to %s: %v %v", ch, res, err)
	}
	return res.MessageID
}

// sqWantEmpty fails unless a receive on ch finds nothing within a second
// and ends its stream with Error 138.
func sqWantEmpty(t *testing.T, raw pb.KubemqClient, ch string) {
	t.Helper()
	q := sqOpen(t, raw)
	req := sqRecvReq(psID("empty"), ch, 1, 0)
	q.wantErr("receive from "+ch+", which should be empty", q.call("receive from "+ch, req), req, sqErrNoMessage)
	q.wantEnd("after Error 138")
}

// sqWantMessage fails unless m is the message sent with id and body, with
// receive count rc.
func sqWantMessage(t *testing.T, what string, m *pb.QueueMessage, id, body string, rc int32) {
	t.Helper()
	if m.MessageID != id || string(m.Body) != body || m.Metadata != "md-"+body || m.Tags["k"] != body || m.Attributes.ReceiveCount != rc {
		t.Errorf("%s: got id %s body %q metadata %q tags %v rc %d; want id %s body %q rc %d",
			what, m.MessageID, m.Body, m.Metadata, m.Tags, m.Attributes.ReceiveCount, id, body, rc)
	}
}

// TestStreamQueueReceive: a receive delivers the oldest message with its
// receive count at 1 and holds it; a second receive on the stream is
// refused and the stream goes on; the ack ends it.
func TestStreamQueueReceive(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		raw := psRaw(t, tg)
		ch := channel(t, "sq")
		id := sqSend(t, raw, ch, "first", nil)
		sqSend(t, raw, ch, "second", nil)
		q, m := sqReceiveOne(t, raw, ch, 10)
		sqWantMessage(t, "first delivery", m, id, "first", 1)
		again := sqRecvReq(psID("again"), ch, 1, 10)
		q.wantErr("a second receive on the stream", q.call("second receive", again), again, sqErrActive)
		q.wantAcked("ack", sqAckReq(sqAck, m), tg.Real)

		q2, m2 := sqReceiveOne(t, raw, ch, 10)
		if string(m2.Body) != "second" || m2.Attributes.ReceiveCount != 1 {
			t.Errorf("next delivery: body %q rc %d, want second, 1", m2.Body, m2.Attributes.ReceiveCount)
		}
		q2.wantAcked("ack the second", sqAckReq(sqAck, m2), tg.Real)
	})
}

// TestStreamQueueAck: an ack must name the held message's sequence (a
// wrong one is refused and the stream goes on); once acked the message is
// gone for good.
func TestStreamQueueAck(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		raw := psRaw(t, tg)
		ch := channel(t, "sqack")
		id := sqSend(t, raw, ch, "a", nil)
		q, m := sqReceiveOne(t, raw, ch, 10)
		sqWantMessage(t, "delivery", m, id, "a", 1)
		wrong := sqAckReq(sqAck, m)
		wrong.RefSequence++
		q.wantErr("ack of another sequence", q.call("wrong ack", wrong), wrong, sqErrAckSeq)
		q.wantAcked("ack", sqAckReq(sqAck, m), tg.Real)
		sqWantEmpty(t, raw, ch)
	})
}

// TestStreamQueueReject: a reject answers, ends the stream and puts the
// message back with its receive count raised.
func TestStreamQueueReject(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		raw := psRaw(t, tg)
		ch := channel(t, "sqrej")
		id := sqSend(t, raw, ch, "r", nil)
		q, m := sqReceiveOne(t, raw, ch, 10)
		wrong := sqAckReq(sqReject, m)
		wrong.RefSequence++
		q.wantErr("reject of another sequence", q.call("wrong reject", wrong), wrong, sqErrAckSeq)
		q.wantOK("reject", sqAckReq(sqReject, m))
		q.wantEnd("after the reject")

		q2, m2 := sqReceiveOne(t, raw, ch, 10)
		sqWantMessage(t, "redelivery", m2, id, "r", 2)
		q2.wantAcked("ack", sqAckReq(sqAck, m2), tg.Real)
	})
}

// TestStreamQueueRejectDeadLetter: with MaxReceiveCount 2 and a dead
// letter queue, the second reject moves the message there, re-routed, its
// receive count starting again.
func TestStreamQueueRejectDeadLetter(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		raw := psRaw(t, tg)
		ch, dlq := channel(t, "sqdl"), channel(t, "sqdl-dead")
		id := sqSend(t, raw, ch, "d", &pb.QueueMessagePolicy{MaxReceiveCount: 2, MaxReceiveQueue: dlq})
		for rc := int32(1); rc <= 2; rc++ {
			q, m := sqReceiveOne(t, raw, ch, 10)
			sqWantMessage(t, "delivery", m, id, "d", rc)
			q.wantOK("reject", sqAckReq(sqReject, m))
			q.wantEnd("after the reject")
		}
		sqWantEmpty(t, raw, ch)

		q, m := sqReceiveOne(t, raw, dlq, 10)
		sqWantMessage(t, "dead letter", m, id, "d", 1)
		if !m.Attributes.ReRouted || m.Attributes.ReRoutedFromQueue != ch {
			t.Errorf("dead letter attributes %+v, want re-routed from %s", m.Attributes, ch)
		}
		q.wantAcked("ack the dead letter", sqAckReq(sqAck, m), tg.Real)
	})
}

// TestStreamQueueExtendVisibility: a visibility change answers at once and
// restarts the timer from now, so that a message held past its first
// visibility can still be acked.
func TestStreamQueueExtendVisibility(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		raw := psRaw(t, tg)
		ch := channel(t, "sqvis")
		sqSend(t, raw, ch, "v", nil)
		q, m := sqReceiveOne(t, raw, ch, 1)
		extend := sqAckReq(sqExtend, m)
		extend.VisibilitySeconds = 30
		q.wantOK("extend visibility", extend)
		time.Sleep(2 * time.Second) // twice the first visibility
		q.wantAcked("ack after the first visibility", sqAckReq(sqAck, m), tg.Real)
		sqWantEmpty(t, raw, ch)
	})
}

// TestStreamQueueVisibilityExpiry: when the visibility passes, the stream
// gets Error 129 (answering the receive) and ends, and the message goes
// back, its receive counted.
func TestStreamQueueVisibilityExpiry(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		raw := psRaw(t, tg)
		ch := channel(t, "sqexp")
		id := sqSend(t, raw, ch, "x", nil)
		q := sqOpen(t, raw)
		req := sqRecvReq(psID("recv"), ch, 5, 1)
		r := q.call("receive", req)
		if r.Message == nil {
			t.Fatalf("receive: %+v, want a message", r)
		}
		q.wantErr("visibility expiry", q.next("the visibility expiry"), req, sqErrVisibility)
		q.wantEnd("after the expiry")

		q2, m2 := sqReceiveOne(t, raw, ch, 10)
		sqWantMessage(t, "redelivery after expiry", m2, id, "x", 2)
		q2.wantAcked("ack", sqAckReq(sqAck, m2), tg.Real)
	})
}

// TestStreamQueueResend: a resend sends a copy of the held message to
// another channel (same id, receive count starting again), settles the
// original, answers and ends the stream.
func TestStreamQueueResend(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		raw := psRaw(t, tg)
		ch, other := channel(t, "sqres"), channel(t, "sqres-to")
		id := sqSend(t, raw, ch, "s", nil)
		q, m := sqReceiveOne(t, raw, ch, 10)
		resend := sqAckReq(sqResend, m)
		resend.RefSequence = 0 // a resend names no sequence
		resend.Channel = other
		q.wantOK("resend", resend)
		q.wantEnd("after the resend")
		sqWantEmpty(t, raw, ch)

		q2, m2 := sqReceiveOne(t, raw, other, 10)
		sqWantMessage(t, "resent copy", m2, id, "s", 1)
		q2.wantAcked("ack the copy", sqAckReq(sqAck, m2), tg.Real)
	})
}

// TestStreamQueueSendModified: a modified message goes out in place of the
// held one (to the channel it names), which is settled.
func TestStreamQueueSendModified(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		raw := psRaw(t, tg)
		ch, other := channel(t, "sqmod"), channel(t, "sqmod-to")
		sqSend(t, raw, ch, "before", nil)
		q, m := sqReceiveOne(t, raw, ch, 10)
		mod := sqAckReq(sqSendModif, m)
		mod.RefSequence = 0
		mod.ModifiedMessage = &pb.QueueMessage{MessageID: psID("mod"), ClientID: m.ClientID, Channel: other,
			Body: []byte("after"), Metadata: "md-after", Tags: map[string]string{"k": "after"}}
		q.wantOK("send modified", mod)
		q.wantEnd("after the modified send")
		sqWantEmpty(t, raw, ch)

		q2, m2 := sqReceiveOne(t, raw, other, 10)
		sqWantMessage(t, "modified message", m2, mod.ModifiedMessage.MessageID, "after", 1)
		q2.wantAcked("ack the modified message", sqAckReq(sqAck, m2), tg.Real)
	})
}

// TestStreamQueueEmpty: a receive on an empty queue answers Error 138 when
// its wait ends, and the stream ends.
func TestStreamQueueEmpty(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		sqWantEmpty(t, psRaw(t, tg), channel(t, "sqempty"))
	})
}

// TestStreamQueueCloseWithoutAck: a stream that ends with a message held
// gives it back, its receive counted (unlike a queues_stream poll).
func TestStreamQueueCloseWithoutAck(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		raw := psRaw(t, tg)
		ch := channel(t, "sqclose")
		id := sqSend(t, raw, ch, "c", nil)
		q, m := sqReceiveOne(t, raw, ch, 60)
		sqWantMessage(t, "delivery", m, id, "c", 1)
		q.cancel()

		q2, m2 := sqReceiveOne(t, raw, ch, 10)
		sqWantMessage(t, "redelivery after the stream closed", m2, id, "c", 2)
		q2.wantAcked("ack", sqAckReq(sqAck, m2), tg.Real)
	})
}

// TestStreamQueueRequestErrors: refused requests are answered in the
// stream, which goes on, in the real broker's order of checks; settlements
// without a message are refused.
func TestStreamQueueRequestErrors(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		raw := psRaw(t, tg)
		ch := channel(t, "sqerr")
		id := psID("c")
		good := &pb.QueueMessage{ClientID: id, Channel: ch, Body: []byte("b")}
		q := sqOpen(t, raw)
		for _, tc := range []struct {
			name string
			req  *pb.StreamQueueMessagesRequest
			want string
		}{
			{"unknown type 0", &pb.StreamQueueMessagesRequest{ClientID: id, Channel: ch}, sqErrType},
			{"unknown type 7", &pb.StreamQueueMessagesRequest{ClientID: id, StreamRequestTypeData: 7, Channel: ch}, sqErrType},
			{"no client id", &pb.StreamQueueMessagesRequest{StreamRequestTypeData: sqReceive, Channel: ch}, sqErrClientID},
			{"no client id before the type", &pb.StreamQueueMessagesRequest{StreamRequestTypeData: 9}, sqErrClientID},
			{"receive, bad channel", &pb.StreamQueueMessagesRequest{ClientID: id, StreamRequestTypeData: sqReceive, Channel: "a b"}, sqErrQueueName},
			{"receive, negative visibility", &pb.StreamQueueMessagesRequest{ClientID: id, StreamRequestTypeData: sqReceive, Channel: ch, VisibilitySeconds: -1}, sqErrVisValue},
			{"receive, visibility too long", &pb.StreamQueueMessagesRequest{ClientID: id, StreamRequestTypeData: sqReceive, Channel: ch, VisibilitySeconds: 43201}, sqErrVisValue},
			{"receive, negative wait", &pb.StreamQueueMessagesRequest{ClientID: id, StreamRequestTypeData: sqReceive, Channel: ch, WaitTimeSeconds: -1}, sqErrWait},
			{"receive, wait too long", &pb.StreamQueueMessagesRequest{ClientID: id, StreamRequestTypeData: sqReceive, Channel: ch, WaitTimeSeconds: 3601}, sqErrWait},
			{"ack of sequence 0", &pb.StreamQueueMessagesRequest{ClientID: id, StreamRequestTypeData: sqAck}, sqErrAckSeq},
			{"reject of sequence 0", &pb.StreamQueueMessagesRequest{ClientID: id, StreamRequestTypeData: sqReject}, sqErrAckSeq},
			{"ack, no message", &pb.StreamQueueMessagesRequest{ClientID: id, StreamRequestTypeData: sqAck, RefSequence: 3}, sqErrNoAck},
			{"reject, no message", &pb.StreamQueueMessagesRequest{ClientID: id, StreamRequestTypeData: sqReject, RefSequence: 3}, sqErrNoReject},
			{"resend, bad channel", &pb.StreamQueueMessagesRequest{ClientID: id, StreamRequestTypeData: sqResend, Channel: "a*"}, sqErrQueueName},
			{"resend, no message", &pb.StreamQueueMessagesRequest{ClientID: id, StreamRequestTypeData: sqResend, Channel: ch}, sqErrNoSend},
			{"extend, negative visibility", &pb.StreamQueueMessagesRequest{ClientID: id, StreamRequestTypeData: sqExtend, VisibilitySeconds: -2}, sqErrVisValue},
			{"modify, no message given", &pb.StreamQueueMessagesRequest{ClientID: id, StreamRequestTypeData: sqSendModif}, sqErrQueueMsg},
			{"modify, empty message", &pb.StreamQueueMessagesRequest{ClientID: id, StreamRequestTypeData: sqSendModif,
				ModifiedMessage: &pb.QueueMessage{ClientID: id, Channel: ch}}, sqErrEmptyMsg},
			{"modify, message without client id", &pb.StreamQueueMessagesRequest{ClientID: id, StreamRequestTypeData: sqSendModif,
				ModifiedMessage: &pb.QueueMessage{Channel: ch, Body: []byte("b")}}, sqErrClientID},
			{"modify, negative visibility", &pb.StreamQueueMessagesRequest{ClientID: id, StreamRequestTypeData: sqSendModif,
				ModifiedMessage: good, VisibilitySeconds: -1}, sqErrVisValue},
			{"modify, no message held", &pb.StreamQueueMessagesRequest{ClientID: id, StreamRequestTypeData: sqSendModif, ModifiedMessage: good}, sqErrNoAck},
		} {
			tc.req.RequestID = psID("e")
			q.wantErr(tc.name, q.call(tc.name, tc.req), tc.req, tc.want)
		}
		// A request without RequestID gets one.
		noID := &pb.StreamQueueMessagesRequest{ClientID: id, StreamRequestTypeData: sqAck}
		q.wantErr("no request id", q.call("no request id", noID), noID, sqErrAckSeq)
		// Still alive: a receive on the empty channel ends it.
		req := sqRecvReq(psID("last"), ch, 1, 0)
		q.wantErr("receive on the empty channel", q.call("last receive", req), req, sqErrNoMessage)
		q.wantEnd("after Error 138")
		// The modified message sent with nothing held went nowhere.
		sqWantEmpty(t, raw, ch)
	})
}

// TestStreamQueueKubemqGoTransaction: kubemq-go's own StreamQueueMessage
// client (QueuesClient.Transaction) receives, rejects, extends, resends and
// acks, and reports Error 138 on an empty queue.
func TestStreamQueueKubemqGoTransaction(t *testing.T) {
	t.Parallel()
	forEachTarget(t, func(t *testing.T, tg *target) {
		lc, ctx := queueLegacy(t, tg)
		ch, other := channel(t, "sqgo"), channel(t, "sqgo-to")
		res, err := lc.Send(ctx, kubemq.NewQueueMessage().SetChannel(ch).SetBody([]byte("g")))
		if err != nil || res.IsError {
			t.Fatalf("send: %v %v", res, err)
		}
		recv := func(from string) *kubemq.QueueTransactionMessageResponse {
			t.Helper()
			tr, err := lc.Transaction(ctx, kubemq.NewQueueTransactionMessageRequest().SetChannel(from).
				SetWaitTimeSeconds(5).SetVisibilitySeconds(10))
			if err != nil {
				t.Fatalf("transaction on %s: %v", from, err)
			}
			return tr
		}
		tr := recv(ch)
		if string(tr.Message.Body) != "g" || tr.Message.Attributes.ReceiveCount != 1 {
			t.Fatalf("first delivery: %+v", tr.Message)
		}
		if err := tr.Reject(); err != nil {
			t.Fatalf("reject: %v", err)
		}
		tr = recv(ch)
		if tr.Message.Attributes.ReceiveCount != 2 {
			t.Errorf("after a reject: receive count %d, want 2", tr.Message.Attributes.ReceiveCount)
		}
		if err := tr.ExtendVisibilitySeconds(20); err != nil {
			t.Fatalf("extend visibility: %v", err)
		}
		if err := tr.Resend(other); err != nil {
			t.Fatalf("resend: %v", err)
		}
		tr = recv(other)
		if string(tr.Message.Body) != "g" || tr.Message.Attributes.ReceiveCount != 1 {
			t.Errorf("resent copy: %+v", tr.Message)
		}
		if err := tr.Ack(); err != nil {
			t.Fatalf("ack: %v", err)
		}
		_, err = lc.Transaction(ctx, kubemq.NewQueueTransactionMessageRequest().SetChannel(ch).
			SetWaitTimeSeconds(1).SetVisibilitySeconds(10))
		if err == nil || err.Error() != sqErrNoMessage {
			t.Errorf("transaction on the emptied queue: %v, want %q", err, sqErrNoMessage)
		}
	})
}
