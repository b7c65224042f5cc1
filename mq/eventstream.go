package mq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	pb "github.com/kubemq-io/protobuf/go"
)

// EventStream publishes plain (not stored) events over one SendEventsStream
// of its own, opened on the first Publish and again after a loss. It is the
// throughput path for progress events: a unary SendEvent costs a round trip
// per event, a stream message costs a write. The broker answers a plain
// event on the stream only when it refuses it (KUBEMQ.md fact 42); those
// answers go to the rejected callback given to NewEventStream. Events written just before a stream breaks are lost
// without a word: plain events are best effort. Safe for concurrent use
// (publishes take turns); Close ends it.
type EventStream struct {
	c        *Conn
	rejected func(error)

	mu     sync.Mutex // held for a whole Publish and Close
	cur    *plainStream
	closed bool
}

type plainStream struct {
	stream pb.Kubemq_SendEventsStreamClient
	cancel context.CancelFunc
	done   chan struct{} // closed when recv returns
}

// NewEventStream returns an EventStream on c. rejected (may be nil) is
// called, from the stream's own goroutine, with each refusal the broker
// sends for an event Publish already handed over.
func (c *Conn) NewEventStream(rejected func(error)) *EventStream {
	if rejected == nil {
		rejected = func(error) {}
	}
	return &EventStream{c: c, rejected: rejected}
}

// Publish hands an event to the stream and returns once the stream took it
// (not once a subscriber got it). ctx bounds the call: a write that gRPC's
// flow control holds past ctx ends the stream (the next Publish opens a new
// one) and fails. body and tags are not kept once it returns. Errors:
// ErrClosed, ErrUnavailable (no connection, or the stream broke; the event
// was not sent and may be published again), ctx's.
func (s *EventStream) Publish(ctx context.Context, channel string, body []byte, tags map[string]string) error {
	if err := s.c.isClosed(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("publish event to %s: %w", channel, err)
	}
	st, err := s.open(ctx)
	if err != nil {
		return classify("publish event to "+channel, err)
	}
	// Send encodes ev before it returns: body and tags are not kept.
	ev := &pb.Event{EventID: newID(), ClientID: s.c.cfg.ClientID, Channel: channel, Body: body, Tags: tags}
	stop := context.AfterFunc(ctx, st.cancel)
	err = st.stream.Send(ev)
	if !stop() {
		s.drop(st)
		return fmt.Errorf("publish event to %s: %w", channel, ctx.Err())
	}
	if err != nil {
		// Send reports io.EOF on a broken stream; Recv has the cause.
		s.drop(st)
		return classify("publish event to "+channel, fmt.Errorf("%w: %w", ErrUnavailable, err))
	}
	return nil
}

// open returns the live stream, opening one when there is none. s.mu is
// held.
func (s *EventStream) open(ctx context.Context) (*plainStream, error) {
	if st := s.cur; st != nil {
		select {
		case <-st.done:
			s.cur = nil
		default:
			return st, nil
		}
	}
	if err := s.c.ready(ctx); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(s.c.life)
	stream, err := s.c.api.SendEventsStream(sctx)
	if err != nil {
		cancel()
		return nil, err
	}
	st := &plainStream{stream: stream, cancel: cancel, done: make(chan struct{})}
	if !s.c.spawn(func() { s.recv(st) }) {
		cancel()
		return nil, ErrClosed
	}
	s.cur = st
	return st, nil
}

// recv reads the broker's answers until the stream ends: for plain events
// only refusals.
func (s *EventStream) recv(st *plainStream) {
	defer close(st.done)
	defer st.cancel()
	for {
		res, err := st.stream.Recv()
		if err != nil {
			return
		}
		if !res.Sent {
			s.rejected(classify("publish event", errors.New(res.Error)))
		}
	}
}

// drop ends st after a failed write. s.mu is held.
func (s *EventStream) drop(st *plainStream) {
	st.cancel()
	if s.cur == st {
		s.cur = nil
	}
}

// Close ends the stream gracefully: it closes the sending side and waits,
// within ctx, for the broker to finish the call, so that the events already
// handed over reach the broker rather than die with a cancelled stream;
// then it cancels the stream. Publish fails with ErrClosed afterwards.
// Closing the Conn ends the stream too (without the wait).
func (s *EventStream) Close(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	st := s.cur
	s.cur = nil
	if st == nil {
		return
	}
	if err := st.stream.CloseSend(); err == nil {
		t := time.NewTimer(time.Second)
		defer t.Stop()
		select {
		case <-st.done:
		case <-ctx.Done():
		case <-t.C:
		}
	}
	st.cancel()
}
