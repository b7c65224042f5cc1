package broker

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	pb "github.com/kubemq-io/protobuf/go"
)

// QueuesUpstream serves the queues_stream send side: each request is a
// batch, answered with one result per message, in order. With a data dir
// the answers wait for the disk while the next requests are read, so that
// the batches of one stream share fsyncs (answerer).
func (s *Server) QueuesUpstream(stream pb.Kubemq_QueuesUpstreamServer) error {
	a := newAnswerer(s.persist)
	defer a.close()
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil // EOF, cancel or Stop: the client is gone
		}
		resp := &pb.QueuesUpstreamResponse{RefRequestID: req.RequestID}
		if len(req.Messages) == 0 {
			resp.IsError, resp.Error = true, "no messages to send"
			a.answerAt(0, func(error) { _ = stream.Send(resp) })
			continue
		}
		sn := s.queues.admit(req.Messages)
		a.answerAt(sn.mark, func(err error) {
			sn.commit(err)
			resp.Results = sn.results
			_ = stream.Send(resp) // a failed send means the stream is ending: Recv says so
		})
	}
}

// QueuesDownstream serves the queues_stream receive side: polls open
// transactions that hold their messages until the client settles them
// (ack, nack, requeue, all or by sequence) or closes them; a stream that
// ends gives its held messages back with their receive counts unchanged.
//
// Polls of one stream are served one at a time by a worker goroutine, in
// order, so that a waiting poll does not hold up the acks that follow it.
func (s *Server) QueuesDownstream(stream pb.Kubemq_QueuesDownstreamServer) error {
	return s.queues.downstream(stream)
}

// downstream is the state of one QueuesDownstream stream.
type downstream struct {
	st      *queueStore
	stream  pb.Kubemq_QueuesDownstreamServer
	answers *answerer // settlements' answers, once on disk

	sendMu sync.Mutex // gRPC forbids concurrent Send

	mu   sync.Mutex
	txns map[string]*txn // open transactions
}

// txn is one poll's held messages.
type txn struct {
	q    *queue
	held []*pb.QueueMessage // sorted by sequence at delivery
	seqs []uint64           // seqs[i]: held[i]'s sequence at delivery (a NAck changes it)
	done []bool             // done[i]: held[i] is settled
	open int

	// q.mu guards these (see queue_strand.go).
	free     int                // room: what the poll did not fill, plus messages settled since
	stranded []*pb.QueueMessage // pushed into its room, seen by no poll
}

func (st *queueStore) downstream(stream pb.Kubemq_QueuesDownstreamServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	stopAfter := context.AfterFunc(st.ctx, cancel)
	defer stopAfter()

	d := &downstream{st: st, stream: stream, answers: newAnswerer(st.persist), txns: map[string]*txn{}}
	polls := make(chan *pb.QueuesDownstreamRequest, pendingPollsPerStream)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case req := <-polls:
				d.poll(ctx, req)
			case <-ctx.Done():
				return
			}
		}
	}()
	defer func() {
		cancel()
		wg.Wait()
		d.answers.close()
		d.releaseAll()
	}()
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil // EOF, cancel or Stop: the client is gone
		}
		if ctx.Err() != nil {
			return nil
		}
		if req.RequestTypeData == pb.QueuesDownstreamRequestType_Get {
			select {
			case polls <- req:
			default:
				d.send(&pb.QueuesDownstreamResponse{
					TransactionId: st.ids.next(), RefRequestId: req.RequestID,
					RequestTypeData: req.RequestTypeData, IsError: true, Error: ErrTooManyPolls.Error(),
				})
			}
			continue
		}
		// The settlement is carried out now; its answer (and the answers
		// after it) waits until it is on disk.
		if resp := d.settle(req); resp != nil {
			d.answers.answer(func(error) { d.send(resp) })
		}
	}
}

func (d *downstream) send(resp *pb.QueuesDownstreamResponse) {
	d.sendMu.Lock()
	defer d.sendMu.Unlock()
	_ = d.stream.Send(resp) // a failed send means the stream is ending
}

// poll serves one Get.
func (d *downstream) poll(ctx context.Context, req *pb.QueuesDownstreamRequest) {
	resp := &pb.QueuesDownstreamResponse{
		TransactionId:   d.st.ids.next(),
		RefRequestId:    req.RequestID,
		RequestTypeData: pb.QueuesDownstreamRequestType_Get,
	}
	var err error
	switch {
	case req.ClientID == "":
		err = errInvalidClientID
	case !validQueueName(req.Channel):
		err = errInvalidQueueName
	case req.MaxItems < 0:
		err = ErrNegativeMaxItems
	}
	if err != nil {
		resp.IsError, resp.Error = true, err.Error()
		d.send(resp)
		return
	}
	n := int(req.MaxItems)
	if n == 0 || n > maxPollItems {
		n = maxPollItems
	}
	q := d.st.queue(req.Channel)
	msgs, strays, _, err := q.takeForced(ctx, n, d.st.pollWait(req.WaitTimeout), !req.AutoAck, !req.AutoAck)
	if err != nil {
		return // the stream is ending; take gave the messages back
	}
	if len(msgs) > 0 && !req.AutoAck {
		held := slices.Clone(msgs)
		if !slices.IsSortedFunc(held, bySeq) {
			slices.SortFunc(held, bySeq)
		}
		seqs := make([]uint64, len(held))
		for i, m := range held {
			seqs[i] = m.Attributes.Sequence
		}
		// A poll that came back short keeps the rest of its room (trap
		// 13): what arrives while its batch is open is stranded there.
		t := &txn{q: q, held: held, seqs: seqs, done: make([]bool, len(held)), open: len(held), stranded: strays, free: max(n-len(held), 0)}
		q.register(t)
		d.mu.Lock()
		d.txns[resp.TransactionId] = t
		d.mu.Unlock()
	}
	resp.Messages = msgs
	d.send(resp)
}

func bySeq(a, b *pb.QueueMessage) int {
	return cmp.Compare(a.Attributes.Sequence, b.Attributes.Sequence)
}

// settle serves every request but Get and returns the response to send,
// or nil (KubeMQ answers successful settlements with nothing; this server
// adds a TransactionComplete response when a transaction has nothing left,
// so that the client can drop it).
func (d *downstream) settle(req *pb.QueuesDownstreamRequest) *pb.QueuesDownstreamResponse {
	resp := &pb.QueuesDownstreamResponse{
		TransactionId:   req.RefTransactionId,
		RefRequestId:    req.RequestID,
		RequestTypeData: req.RequestTypeData,
	}
	fail := func(err error) *pb.QueuesDownstreamResponse {
		resp.IsError, resp.Error = true, err.Error()
		return resp
	}
	switch req.RequestTypeData {
	case pb.QueuesDownstreamRequestType_AckAll, pb.QueuesDownstreamRequestType_AckRange,
		pb.QueuesDownstreamRequestType_NAckAll, pb.QueuesDownstreamRequestType_NAckRange,
		pb.QueuesDownstreamRequestType_ReQueueAll, pb.QueuesDownstreamRequestType_ReQueueRange,
		pb.QueuesDownstreamRequestType_ActiveOffsets, pb.QueuesDownstreamRequestType_TransactionStatus,
		pb.QueuesDownstreamRequestType_CloseByClient:
	default:
		resp.RequestTypeData = pb.QueuesDownstreamRequestType_PollRequestTypeUnknown
		return fail(errRequestUnknown)
	}

	// The poll's response may still be marshalling the messages this
	// request settles (a client can only settle what it received, but the
	// race detector cannot see that through the network).
	d.sendMu.Lock()
	//nolint:staticcheck // an empty critical section is the point
	d.sendMu.Unlock()

	d.mu.Lock()
	defer d.mu.Unlock()
	t := d.txns[req.RefTransactionId]
	if t == nil {
		return fail(errTxnNotFound)
	}
	if req.RequestTypeData == pb.QueuesDownstreamRequestType_ActiveOffsets ||
		req.RequestTypeData == pb.QueuesDownstreamRequestType_TransactionStatus {
		resp.ActiveOffsets = t.offsets()
		return resp
	}
	before := t.open
	closing := req.RequestTypeData == pb.QueuesDownstreamRequestType_CloseByClient
	if closing {
		t.q.drop(t) // what it stranded goes back first, behind what it held
	}
	err := d.apply(t, req)
	if !closing {
		t.q.settled(t, before-t.open, t.open == 0)
	}
	if t.open == 0 {
		delete(d.txns, req.RefTransactionId)
	}
	if err != nil {
		return fail(err)
	}
	if t.open == 0 {
		resp.TransactionComplete = true
		return resp
	}
	return nil
}

// apply carries out one settlement request on t.
func (d *downstream) apply(t *txn, req *pb.QueuesDownstreamRequest) error {
	var err error
	switch req.RequestTypeData {
	case pb.QueuesDownstreamRequestType_AckAll:
		t.q.ack(t.takeAll())
	case pb.QueuesDownstreamRequestType_NAckAll:
		t.q.nack(t.takeAll())
	case pb.QueuesDownstreamRequestType_CloseByClient:
		t.q.release(t.takeAll())
	case pb.QueuesDownstreamRequestType_ReQueueAll:
		if !validQueueName(req.ReQueueChannel) {
			return errBadRequeueChannel
		}
		err = d.st.requeue(t.q, t.takeAll(), req.ReQueueChannel)
	case pb.QueuesDownstreamRequestType_AckRange:
		var msgs []*pb.QueueMessage
		msgs, err = t.takeRange(req.SequenceRange, "ack")
		t.q.ack(msgs)
	case pb.QueuesDownstreamRequestType_NAckRange:
		var msgs []*pb.QueueMessage
		msgs, err = t.takeRange(req.SequenceRange, "nack")
		t.q.nack(msgs)
	case pb.QueuesDownstreamRequestType_ReQueueRange:
		if !validQueueName(req.ReQueueChannel) {
			return errBadRequeueChannel
		}
		var msgs []*pb.QueueMessage
		msgs, err = t.takeRange(req.SequenceRange, "requeue")
		if rqErr := d.st.requeue(t.q, msgs, req.ReQueueChannel); err == nil {
			err = rqErr
		}
	}
	return err
}

var errBadRequeueChannel = fmt.Errorf("cannot requeue messages with empty channel destination : %w", errInvalidQueueName)

// releaseAll gives back what the stream's open transactions hold.
func (d *downstream) releaseAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, t := range d.txns {
		t.q.drop(t)
		t.q.release(t.takeAll())
		delete(d.txns, id)
	}
}

func (t *txn) offsets() []int64 {
	out := make([]int64, 0, t.open)
	for i, seq := range t.seqs {
		if !t.done[i] {
			out = append(out, int64(seq))
		}
	}
	return out
}

func (t *txn) takeAll() []*pb.QueueMessage {
	out := make([]*pb.QueueMessage, 0, t.open)
	for i, m := range t.held {
		if !t.done[i] {
			out = append(out, m)
			t.done[i] = true
		}
	}
	t.open = 0
	return out
}

// takeRange takes the messages with the given sequences, stopping at the
// first one the transaction does not hold (KubeMQ settles the ones before
// it and reports it).
func (t *txn) takeRange(seqs []int64, what string) ([]*pb.QueueMessage, error) {
	if len(seqs) == 0 {
		return nil, fmt.Errorf("cannot %s empty list of of offsets", what)
	}
	out := make([]*pb.QueueMessage, 0, len(seqs))
	for _, seq := range seqs {
		i, found := slices.BinarySearch(t.seqs, uint64(seq))
		if seq <= 0 || !found || t.done[i] {
			return out, fmt.Errorf("invalid %s sequence id %d", what, seq)
		}
		out = append(out, t.held[i])
		t.done[i] = true
		t.open--
	}
	return out, nil
}
