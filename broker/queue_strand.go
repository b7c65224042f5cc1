package broker

import (
	"slices"

	pb "github.com/kubemq-io/protobuf/go"
)

// Stranding: see doc.go.

// register adds t, which holds messages, to the queue's open transactions.
func (q *queue) register(t *txn) {
	q.mu.Lock()
	q.open = append(q.open, t)
	q.countRoomLocked()
	q.mu.Unlock()
}

// settled records that one request settled k more messages of t; done: t
// holds nothing more, and closes.
func (q *queue) settled(t *txn, k int, done bool) {
	if k == 0 && !done {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !done {
		t.free += k
		q.fillLocked(t, k)
		q.countRoomLocked()
		return
	}
	moving := append(q.closeLocked(t), q.popRawLocked(k)...)
	u := q.oldestOpenLocked()
	if u != nil {
		// A peek may have stranded more in u than its size
		// (strandPeekedLocked): then nothing more moves there.
		n := max(min(len(moving), len(u.held)-len(u.stranded)), 0)
		u.stranded = append(u.stranded, moving[:n]...)
		moving = moving[n:]
	}
	q.restoreStrandedLocked(moving)
	if u == nil {
		q.shadow += len(moving)
	}
	q.countRoomLocked()
	q.wakeLocked()
}

// drop closes t for a client that gave it up (its stream ended, or it
// closed the transaction): what t stranded goes back to the head of the
// queue. The caller releases t's held messages.
func (q *queue) drop(t *txn) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.restoreStrandedLocked(q.closeLocked(t))
	q.countRoomLocked()
	q.wakeLocked()
}

// closeLocked removes t from the open transactions and returns what it
// stranded.
func (q *queue) closeLocked(t *txn) []*pb.QueueMessage {
	if i := slices.Index(q.open, t); i >= 0 {
		q.open = slices.Delete(q.open, i, i+1)
	}
	out := t.stranded
	t.stranded = nil
	return out
}

// strandPeekedLocked moves the n messages at the head of the queue, which
// a peek saw, into the oldest open transaction when there is one. On
// KubeMQ a peek is a member of the queue's group that holds what it saw
// until it closes; closing moves those messages to another open member,
// and one whose poll has returned (an open transaction) holds them,
// unseen, until it completes (measured: a lone task delivered 100 ms late,
// or one batch later). With no transaction open they stay where they are.
func (q *queue) strandPeekedLocked(n int) {
	u := q.oldestOpenLocked()
	if u == nil || n <= 0 {
		return
	}
	u.stranded = append(u.stranded, q.popRawLocked(n)...)
	q.countRoomLocked()
}

// oldestOpenLocked returns the oldest open transaction, or nil.
func (q *queue) oldestOpenLocked() *txn {
	if len(q.open) == 0 {
		return nil
	}
	return q.open[0]
}

// fillRoomLocked pushes ready messages into the room of open transactions
// (partly settled ones, and polls that came back short: a poll's room is
// what it asked for), oldest first: called when messages arrive.
func (q *queue) fillRoomLocked() {
	if q.room == 0 || q.ready.len() == 0 {
		return
	}
	for _, t := range q.open {
		q.fillLocked(t, t.free)
	}
	q.countRoomLocked()
}

// fillLocked strands up to n ready messages in t, within its room.
func (q *queue) fillLocked(t *txn, n int) {
	n = min(n, t.free-len(t.stranded))
	if n > 0 {
		t.stranded = append(t.stranded, q.popRawLocked(n)...)
	}
}

// countRoomLocked recounts the free room of the open transactions.
func (q *queue) countRoomLocked() {
	q.room = 0
	for _, t := range q.open {
		q.room += max(t.free-len(t.stranded), 0)
	}
}

// popRawLocked takes up to n messages from the head of ready into the
// stranded state: not a delivery, so nothing about them changes.
func (q *queue) popRawLocked(n int) []*pb.QueueMessage {
	n = min(n, q.ready.len())
	if n <= 0 {
		return nil
	}
	out := make([]*pb.QueueMessage, n)
	for i := range out {
		m := q.ready.popFront()
		q.readyBytes -= msgBytes(m)
		out[i] = m
	}
	q.shadow = max(q.shadow-n, 0)
	q.inflight += n
	return out
}

// restoreStrandedLocked puts stranded messages back at the head of the
// queue, in order.
func (q *queue) restoreStrandedLocked(msgs []*pb.QueueMessage) {
	for i := len(msgs) - 1; i >= 0; i-- {
		q.ready.pushFront(msgs[i])
		q.readyBytes += msgBytes(msgs[i])
	}
	q.inflight -= len(msgs)
}
