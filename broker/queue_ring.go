package broker

import pb "github.com/kubemq-io/protobuf/go"

// ring is a growable FIFO that can also push at the front.
type ring struct {
	buf  []*pb.QueueMessage
	head int
	n    int
}

func (r *ring) len() int { return r.n }

func (r *ring) grow() {
	size := max(16, 2*len(r.buf))
	buf := make([]*pb.QueueMessage, size)
	for i := 0; i < r.n; i++ {
		buf[i] = r.buf[(r.head+i)%len(r.buf)]
	}
	r.buf, r.head = buf, 0
}

func (r *ring) pushBack(m *pb.QueueMessage) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.buf[(r.head+r.n)%len(r.buf)] = m
	r.n++
}

func (r *ring) pushFront(m *pb.QueueMessage) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.head = (r.head - 1 + len(r.buf)) % len(r.buf)
	r.buf[r.head] = m
	r.n++
}

func (r *ring) popFront() *pb.QueueMessage {
	m := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	if r.n == 0 {
		r.head = 0
		if len(r.buf) > 1024 {
			r.buf = nil // let a burst's buffer go
		}
	}
	return m
}

func (r *ring) at(i int) *pb.QueueMessage { return r.buf[(r.head+i)%len(r.buf)] }

// removeAt removes the i-th message; O(n), used only by peek on expired
// messages.
func (r *ring) removeAt(i int) {
	for ; i < r.n-1; i++ {
		r.buf[(r.head+i)%len(r.buf)] = r.buf[(r.head+i+1)%len(r.buf)]
	}
	r.buf[(r.head+r.n-1)%len(r.buf)] = nil
	r.n--
}

func (r *ring) clear() { *r = ring{} }

// delayHeap orders delayed messages by DelayedTo.
type delayHeap []*pb.QueueMessage

func (h delayHeap) Len() int { return len(h) }
func (h delayHeap) Less(i, j int) bool {
	return h[i].Attributes.DelayedTo < h[j].Attributes.DelayedTo
}
func (h delayHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *delayHeap) Push(x any)   { *h = append(*h, x.(*pb.QueueMessage)) }
func (h *delayHeap) Pop() any {
	old := *h
	m := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return m
}
