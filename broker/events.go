package broker

import (
	"context"
	"errors"
	"io"
	"time"

	pb "github.com/kubemq-io/protobuf/go"
)

// SendEvent publishes one event. With Store false it goes to the events
// subscribers of its channel at once and is lost when there are none; with
// Store true it is appended to the channel's events store (see
// events_store.go). The result carries the event id, made up when the event
// has none. Invalid events get the KubeMQ error text as a gRPC Internal
// error, like the real broker; the call never waits for a subscriber.
func (s *Server) SendEvent(ctx context.Context, ev *pb.Event) (*pb.Result, error) {
	res, pe, err := s.pubsub.sendEvent(ev)
	if err == nil && pe != nil {
		err = pe.committed(s.persist.await(pe.mark))
	}
	if err != nil {
		if errors.Is(err, ErrClosed) {
			return nil, psClosed()
		}
		return nil, psError(err)
	}
	return res, nil
}

// SendEventsStream is the stream kubemq-go uses for StreamEvents and
// StreamEventsStore (EventsClient.Stream, EventsStoreClient.Stream). Like the
// real broker it answers every events store event with a Result and a plain
// event only when it fails. It ends when the client closes its side. With a
// data dir the answers wait for the disk while the next events are read, so
// that the events of one stream share fsyncs (answerer).
func (s *Server) SendEventsStream(stream pb.Kubemq_SendEventsStreamServer) error {
	a := newAnswerer(s.persist)
	defer a.close()
	send := func(res *pb.Result) {
		_ = stream.Send(res) // a failed send means the stream is ending: Recv says so
	}
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		res, pe, err := s.pubsub.sendEvent(ev)
		switch {
		case err != nil:
			res = &pb.Result{EventID: ev.GetEventID(), Sent: false, Error: err.Error()}
		case !ev.GetStore():
			continue
		}
		if pe == nil {
			a.answerAt(0, func(error) { send(res) })
			continue
		}
		a.answerAt(pe.mark, func(err error) {
			if err := pe.committed(err); err != nil {
				res = &pb.Result{EventID: ev.GetEventID(), Sent: false, Error: err.Error()}
			}
			send(res)
		})
	}
}

// SubscribeToEvents streams events (SubscribeTypeData Events) or events
// store events (EventsStore, with a start policy) of one channel to the
// caller until it goes away or the server closes. Without a group every
// subscriber gets every event; within a group each event goes to one member.
// Events subscriptions may use NATS wildcards ('*' for one token, '>' for
// the rest); events store ones may not.
func (s *Server) SubscribeToEvents(req *pb.Subscribe, stream pb.Kubemq_SubscribeToEventsServer) error {
	p := s.pubsub
	if p.isClosed() {
		return psClosed()
	}
	if req == nil {
		req = &pb.Subscribe{}
	}
	switch req.SubscribeTypeData {
	case pb.Subscribe_Events:
		if err := psValidateSubscribe(req, false); err != nil {
			return psError(err)
		}
		return psServe(p, &p.events, stream.Context(), req.Channel, req.Group, req.ClientID, stream.Send)
	case pb.Subscribe_EventsStore:
		return p.subscribeStore(stream.Context(), req, stream.Send)
	default:
		return psError(psErrSubscribeType)
	}
}

// sendEvent validates ev, gives it an id when it has none, and publishes or
// stores it. Errors are KubeMQ's texts, or ErrClosed. With a data dir a
// stored event comes back pending: it is published, and may be answered,
// once its record is on disk (pendingEvent.committed).
func (p *pubSub) sendEvent(ev *pb.Event) (*pb.Result, *pendingEvent, error) {
	if p.isClosed() {
		return nil, nil, ErrClosed
	}
	if ev == nil {
		ev = &pb.Event{}
	}
	if err := psValidateEvent(ev); err != nil {
		return nil, nil, err
	}
	if ev.EventID == "" {
		ev.EventID = p.ids.next()
	}
	res := &pb.Result{EventID: ev.EventID, Sent: true}
	if !ev.Store {
		p.events.publish(ev.Channel, &pb.EventReceive{
			EventID:  ev.EventID,
			Channel:  ev.Channel,
			Metadata: ev.Metadata,
			Body:     ev.Body,
			Tags:     ev.Tags,
		})
		return res, nil, nil
	}
	if p.persist != nil {
		if err := p.persist.failed(); err != nil {
			return nil, nil, refused(err)
		}
	}
	c := p.storeChannel(ev.Channel)
	seq := c.append(ev, time.Now())
	if p.persist == nil {
		return res, nil, nil
	}
	return res, &pendingEvent{c: c, seq: seq, mark: p.persist.mark()}, nil
}

// pendingEvent is an events store event appended and logged, not yet known
// to be on disk.
type pendingEvent struct {
	c    *storeChannel
	seq  uint64
	mark uint64 // the log's last record once it was logged
}

// committed publishes the event once its record is on disk; err: the disk
// failed to keep it, and it is refused.
func (pe *pendingEvent) committed(err error) error {
	if err != nil {
		return refused(err)
	}
	pe.c.publish(pe.seq)
	return nil
}

// psValidateEvent applies the real broker's checks to an event, in its
// order.
func psValidateEvent(ev *pb.Event) error {
	if ev.ClientID == "" {
		return psErrClientID
	}
	if err := psValidateChannel(ev.Channel, true); err != nil {
		return err
	}
	if ev.Metadata == "" && len(ev.Body) == 0 {
		return psErrMessageEmpty
	}
	return nil
}

// psValidateSubscribe applies the real broker's checks to an events or
// events store subscription, in its order.
func psValidateSubscribe(req *pb.Subscribe, store bool) error {
	if req.ClientID == "" {
		return psErrClientID
	}
	if err := psValidateChannel(req.Channel, false); err != nil {
		return err
	}
	if !store {
		if req.EventsStoreTypeData != pb.Subscribe_EventsStoreTypeUndefined {
			return psErrNotStoreType
		}
		return nil
	}
	if psWildcard(req.Channel) {
		return psErrWildcards
	}
	switch req.EventsStoreTypeData {
	case pb.Subscribe_EventsStoreTypeUndefined:
		return psErrStoreTypeUndefined
	case pb.Subscribe_StartAtSequence:
		if req.EventsStoreTypeValue <= 0 {
			return psErrStartSequence
		}
	case pb.Subscribe_StartAtTime:
		if req.EventsStoreTypeValue <= 0 {
			return psErrStartAtTime
		}
	case pb.Subscribe_StartAtTimeDelta:
		if req.EventsStoreTypeValue <= 0 {
			return psErrStartAtDelta
		}
	}
	return nil
}
