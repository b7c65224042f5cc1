package broker_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/broker/brokertest"
	pb "github.com/kubemq-io/protobuf/go"
)

// queueFuzzSeeds are the request shapes of the table tests above.
var queueFuzzSeeds = []struct {
	channel, clientID   string
	maxItems, waitMs    int32
	autoAck             bool
	reqType             int32
	seq                 int64
	requeue             string
	body                []byte
	maxRecv, delay, exp int32
	recvMax, recvWait   int32
	peek                bool
	realTxn             bool
}{
	{"fz.q", "c", 1, 0, false, int32(pb.QueuesDownstreamRequestType_AckAll), 0, "", []byte("x"), 0, 0, 0, 1, 0, false, true},
	{"fz.q", "c", 0, 10, false, int32(pb.QueuesDownstreamRequestType_NAckRange), 1, "", []byte("x"), 1, 0, 0, 1, 1, true, true},
	{"fz.q", "c", 5, -5, true, int32(pb.QueuesDownstreamRequestType_ReQueueAll), 0, "fz.other", []byte("x"), 2, 0, 1, 3, 0, false, true},
	{"", "", -1, 1 << 30, false, 99, -1, "bad*", nil, -1, -1, -1, -1, -1, true, false},
	{"fz.q", "c", 1 << 30, 0, false, int32(pb.QueuesDownstreamRequestType_ReQueueRange), 1, "", []byte("x"), 1025, 1, 0, 2000, 4000, false, true},
	{"a b", "c", 2, 0, false, int32(pb.QueuesDownstreamRequestType_CloseByClient), 0, "", []byte("x"), 0, 0, 0, 1, 0, true, true},
	{"fz.q", "c", 3, 0, false, int32(pb.QueuesDownstreamRequestType_ActiveOffsets), 7, "", []byte("x"), 0, 2, 0, 1, 0, false, false},
}

// FuzzQueueRequests drives the queue RPCs with arbitrary request fields
// through plain gRPC: a send, a poll, a settlement on the poll's
// transaction (or a made-up one), a legacy receive or peek, and queue
// info. Whatever the fields, every call must answer (an error is fine) and
// a closed stream must leave nothing in flight.
func FuzzQueueRequests(f *testing.F) {
	for _, s := range queueFuzzSeeds {
		f.Add(s.channel, s.clientID, s.maxItems, s.waitMs, s.autoAck, s.reqType, s.seq, s.requeue, s.body,
			s.maxRecv, s.delay, s.exp, s.recvMax, s.recvWait, s.peek, s.realTxn)
	}
	opts := fastOpts
	opts.PollWaitFloor = time.Millisecond
	opts.SecondLength = time.Millisecond
	opts.DefaultMaxReceiveCount = 4
	srv := brokertest.NewServer(f, opts)
	c := rawClient(f, srv.Addr)
	var run atomic.Int64
	f.Fuzz(func(t *testing.T, channel, clientID string, maxItems, waitMs int32, autoAck bool, reqType int32, seq int64,
		requeue string, body []byte, maxRecv, delay, exp, recvMax, recvWait int32, peek, realTxn bool) {
		// Keep waits bounded: the server honours long ones, and a fuzz run
		// must not sleep for days.
		waitMs %= 200
		recvWait %= 3
		delay %= 3
		if channel != "" {
			channel = fmt.Sprintf("%s.%d", channel, run.Add(1))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()

		res, err := c.SendQueueMessage(ctx, &pb.QueueMessage{ClientID: clientID, Channel: channel, Body: body,
			Policy: &pb.QueueMessagePolicy{MaxReceiveCount: maxRecv, DelaySeconds: delay, ExpirationSeconds: exp, MaxReceiveQueue: requeue}})
		if err != nil || res == nil {
			t.Fatalf("send: %v %v", res, err)
		}

		d := openDownstream(t, c)
		if err := d.s.Send(&pb.QueuesDownstreamRequest{RequestID: "get", ClientID: clientID, RequestTypeData: pb.QueuesDownstreamRequestType_Get,
			Channel: channel, MaxItems: maxItems, WaitTimeout: waitMs, AutoAck: autoAck}); err != nil {
			t.Fatalf("poll: %v", err)
		}
		got := d.recv()
		txID := got.TransactionId
		if !realTxn {
			txID = requeue
		}
		d.send(&pb.QueuesDownstreamRequest{RequestID: "settle", RequestTypeData: pb.QueuesDownstreamRequestType(reqType),
			RefTransactionId: txID, SequenceRange: []int64{seq, seq + 1}, ReQueueChannel: requeue})
		// A request the server always answers, after the settlement (requests
		// of a stream are served in order): proves the stream is alive.
		d.send(&pb.QueuesDownstreamRequest{RequestID: "probe", RequestTypeData: pb.QueuesDownstreamRequestType_ActiveOffsets,
			RefTransactionId: "no-such-transaction"})
		for {
			r := d.recv()
			if r.RefRequestId == "probe" {
				break
			}
		}
		d.cancel()
		if validQueueNameForTest(channel) {
			waitFor(t, 3*time.Second, "held messages to come back", func() bool { return srv.InFlight(channel) == 0 })
		}

		if _, err := c.ReceiveQueueMessages(ctx, &pb.ReceiveQueueMessagesRequest{RequestID: "r", ClientID: clientID, Channel: channel,
			MaxNumberOfMessages: recvMax, WaitTimeSeconds: recvWait, IsPeak: peek}); err != nil {
			t.Fatalf("receive: %v", err)
		}
		if _, err := c.QueuesInfo(ctx, &pb.QueuesInfoRequest{RequestID: "i", QueueName: channel}); err != nil {
			t.Fatalf("queues info: %v", err)
		}
		for _, ch := range []string{channel, requeue} {
			if validQueueNameForTest(ch) {
				checkHeldBytes(t, srv.Broker.QueueSnapshot(ch), ch)
			}
		}
	})
}

// checkHeldBytes checks that a queue with nothing in flight counts exactly
// its messages against MaxQueueBytes: body, metadata, ids, tags and 256
// bytes each.
func checkHeldBytes(t *testing.T, st broker.QueueState, ch string) {
	t.Helper()
	if st.InFlight != 0 {
		return
	}
	var want int64
	for _, m := range append(st.Waiting, st.Delayed...) {
		want += int64(len(m.Body) + len(m.Metadata) + len(m.MessageID) + len(m.ClientID) + 256)
		for k, v := range m.Tags {
			want += int64(len(k) + len(v))
		}
	}
	if st.HeldBytes != want {
		t.Errorf("queue %q: held bytes %d, want %d for its %d waiting and %d delayed messages", ch, st.HeldBytes, want, len(st.Waiting), len(st.Delayed))
	}
}

func validQueueNameForTest(name string) bool {
	for _, r := range name {
		if r == ' ' || r == '*' || r == '>' || r < 0x20 || r == 0x7f {
			return false
		}
	}
	return name != "" && name[len(name)-1] != '.'
}
