package broker

import (
	"slices"
	"strings"

	pb "github.com/kubemq-io/protobuf/go"
)

// QueueState is a snapshot of one queue channel, for tests.
type QueueState struct {
	// Waiting are the messages ready for delivery, in delivery order.
	Waiting []*pb.QueueMessage
	// Delayed are the messages whose DelaySeconds has not passed yet.
	Delayed []*pb.QueueMessage
	// InFlight counts the messages held by open poll transactions.
	InFlight int
	// Open counts the poll transactions holding messages now: on KubeMQ
	// each one is a member of the queue's NATS Streaming queue group, and
	// one completing while another is open strands messages in it
	// (queue_strand.go).
	Open int
	// Sent counts the messages ever stored in the channel (NAcks count
	// again); Delivered the deliveries.
	Sent, Delivered int64
	// HeldBytes is what the channel's messages (waiting, delayed, in
	// flight) count against Options.MaxQueueBytes.
	HeldBytes int64
}

// QueueSnapshot returns deep copies of what the queue channel name holds.
// A channel never used gives the zero QueueState. Safe for concurrent use.
func (s *Server) QueueSnapshot(name string) QueueState {
	q := s.queues.lookup(name)
	if q == nil {
		return QueueState{}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	st := QueueState{InFlight: q.inflight, Open: len(q.open), Sent: q.sent, Delivered: q.delivered, HeldBytes: q.held.Load()}
	for i := 0; i < q.ready.len(); i++ {
		st.Waiting = append(st.Waiting, cloneMessage(q.ready.at(i)))
	}
	for _, m := range q.delayed {
		st.Delayed = append(st.Delayed, cloneMessage(m))
	}
	slices.SortFunc(st.Delayed, func(a, b *pb.QueueMessage) int {
		return int(a.Attributes.DelayedTo - b.Attributes.DelayedTo)
	})
	return st
}

// info reports the channels named in filter (names separated by ";"; all
// when empty) that ever held a message, like KubeMQ's QueuesInfo.
func (st *queueStore) info(filter string) *pb.QueuesInfo {
	var names map[string]bool
	if filter != "" {
		names = map[string]bool{}
		for _, n := range strings.Split(filter, ";") {
			names[n] = true
		}
	}
	st.mu.RLock()
	qs := make([]*queue, 0, len(st.queues))
	for name, q := range st.queues {
		if names == nil || names[name] {
			qs = append(qs, q)
		}
	}
	st.mu.RUnlock()
	slices.SortFunc(qs, func(a, b *queue) int { return strings.Compare(a.name, b.name) })
	out := &pb.QueuesInfo{}
	for _, q := range qs {
		q.mu.Lock()
		qi := &pb.QueueInfo{
			Name:         q.name,
			Messages:     int64(q.ready.len() + q.inflight + len(q.delayed)),
			Bytes:        q.readyBytes,
			LastSequence: int64(q.seq),
			Sent:         q.sent,
			Delivered:    q.delivered,
			// Like KubeMQ, Waiting counts what is delivered and not yet
			// settled as well as what is ready.
			Waiting:     int64(q.ready.len() + q.inflight),
			Subscribers: int64(q.waiters),
		}
		if q.ready.len() > 0 {
			qi.FirstSequence = int64(q.ready.at(0).Attributes.Sequence)
		}
		q.mu.Unlock()
		if qi.Sent == 0 {
			continue
		}
		out.Queues = append(out.Queues, qi)
		out.Sent += qi.Sent
		out.Delivered += qi.Delivered
		out.Waiting += qi.Waiting
	}
	out.TotalQueue = int32(len(out.Queues))
	return out
}
