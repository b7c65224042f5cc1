package mq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/inferq/inferq/lograte"
	pb "github.com/kubemq-io/protobuf/go"
)

// Event is a received event or events store message.
type Event struct {
	ID       string
	Channel  string
	Metadata string
	Body     []byte
	Tags     map[string]string
	// Sequence and Timestamp are set for events store messages.
	Sequence  uint64
	Timestamp time.Time
}

// SendEvent publishes a (not stored) event: subscribers connected now get
// it, nobody else ever will. Use it for progress and alerts. Safe for
// concurrent use; ctx bounds the call.
func (c *Conn) SendEvent(ctx context.Context, channel string, body []byte, tags map[string]string) error {
	if err := c.isClosed(); err != nil {
		return err
	}
	res, err := c.api.SendEvent(ctx, &pb.Event{
		EventID: newID(), ClientID: c.cfg.ClientID, Channel: channel, Body: body, Tags: maps.Clone(tags),
	})
	if err != nil {
		return classify("send event to "+channel, err)
	}
	if !res.Sent {
		return classify("send event to "+channel, errors.New(res.Error))
	}
	return nil
}

// SendEventStore stores an event on channel and waits for the broker's
// confirmation of this event. Calls share one SendEventsStream, so many
// concurrent calls pipeline on it (the throughput path for replies). A lost
// stream fails the calls waiting on it with ErrUnavailable and the next
// call opens a new one. Safe for concurrent use; ctx bounds the call (an
// event whose ctx ended may still be stored).
func (c *Conn) SendEventStore(ctx context.Context, channel string, body []byte, tags map[string]string) error {
	if err := c.isClosed(); err != nil {
		return err
	}
	ev := &pb.Event{
		EventID: newID(), ClientID: c.cfg.ClientID, Channel: channel, Body: body, Store: true, Tags: maps.Clone(tags),
	}
	st, err := c.events.get(ctx)
	if err != nil {
		return classify("send event store to "+channel, err)
	}
	return st.send(ctx, ev)
}

// storeSender keeps the events store stream (the kubemq-go wrapper of
// this stream, StreamEventsStore, leaves a goroutine reading the caller's
// channel after a stream error, which eats the next event; hence our own).
type storeSender struct {
	c   *Conn
	mu  sync.Mutex
	cur *storeStream
}

type storeStream struct {
	c      *Conn
	stream pb.Kubemq_SendEventsStreamClient
	cancel context.CancelFunc
	sendMu sync.Mutex

	mu      sync.Mutex
	pending map[string]chan error
	err     error // set when the stream is dead
}

func newStoreSender(c *Conn) *storeSender { return &storeSender{c: c} }

// get returns the live stream, opening one when there is none.
func (s *storeSender) get(ctx context.Context) (*storeStream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != nil && s.cur.alive() {
		return s.cur, nil
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
	st := &storeStream{c: s.c, stream: stream, cancel: cancel, pending: map[string]chan error{}}
	if !s.c.spawn(st.recv) {
		cancel()
		return nil, ErrClosed
	}
	s.cur = st
	return st, nil
}

func (st *storeStream) alive() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.err == nil
}

func (st *storeStream) recv() {
	for {
		res, err := st.stream.Recv()
		if err != nil {
			if st.c.closed.Load() {
				err = ErrClosed
			}
			st.fail(classify("events store stream", err))
			return
		}
		st.mu.Lock()
		ch := st.pending[res.EventID]
		delete(st.pending, res.EventID)
		st.mu.Unlock()
		if ch == nil {
			continue
		}
		if res.Sent {
			ch <- nil
		} else {
			ch <- classify("store event", errors.New(res.Error))
		}
	}
}

// fail ends the stream and fails every waiting call with err.
func (st *storeStream) fail(err error) {
	st.mu.Lock()
	if st.err == nil {
		st.err = err
	}
	for id, ch := range st.pending {
		ch <- st.err
		delete(st.pending, id)
	}
	st.mu.Unlock()
	st.cancel()
}

func (st *storeStream) send(ctx context.Context, ev *pb.Event) error {
	ch := make(chan error, 1)
	st.mu.Lock()
	if st.err != nil {
		st.mu.Unlock()
		return fmt.Errorf("send event store to %s: %w", ev.Channel, st.err)
	}
	st.pending[ev.EventID] = ch
	st.mu.Unlock()
	st.sendMu.Lock()
	err := st.stream.Send(ev)
	st.sendMu.Unlock()
	if err != nil {
		// Send reports io.EOF on a broken stream; Recv has the cause.
		st.fail(classify("events store stream", fmt.Errorf("%w: %w", ErrUnavailable, err)))
	}
	select {
	case err := <-ch:
		if err != nil {
			return fmt.Errorf("send event store to %s: %w", ev.Channel, err)
		}
		return nil
	case <-ctx.Done():
		st.mu.Lock()
		delete(st.pending, ev.EventID)
		st.mu.Unlock()
		return ctx.Err()
	}
}

// SubscribeEvents subscribes to the events of channel (with group, the
// members of a group share the events, each going to one of them). The
// subscription reconnects with backoff after a stream loss or a broker
// restart (events sent meanwhile are lost: events are not stored). The
// channel is closed when ctx ends or the Conn closes; read it promptly
// (the subscription waits for the reader). An error is returned only for
// invalid arguments.
func (c *Conn) SubscribeEvents(ctx context.Context, channel, group string) (<-chan Event, error) {
	return c.subscribe(ctx, &pb.Subscribe{
		SubscribeTypeData: pb.Subscribe_Events, ClientID: c.cfg.ClientID, Channel: channel, Group: group,
	})
}

// SubscribeEventsStore subscribes to the events store channel from
// sequence startSeq (0: only new events). After a stream loss it
// resubscribes from the sequence after the last one it delivered, so
// nothing is skipped; a broker that lost its store may replay or skip
// (delivery is at least once). Channel, group, close and error rules as
// for SubscribeEvents.
//
// Each events store subscription gets its own client id, made of
// [A-Za-z0-9_-] only: real KubeMQ v2.4.0 (NATS streaming underneath)
// silently delivers nothing to a second store subscription with the same
// client id (TestStoreSubscriptionsGetTheirOwnClientIDs), and nothing was
// delivered either to ids such as "producer-Test...-real-unknown_model:_..."
// until they were rewritten this way.
func (c *Conn) SubscribeEventsStore(ctx context.Context, channel, group string, startSeq uint64) (<-chan Event, error) {
	sub := &pb.Subscribe{
		SubscribeTypeData: pb.Subscribe_EventsStore, ClientID: storeClientID(c.cfg.ClientID, c.token, c.clients.Add(1)),
		Channel: channel, Group: group,
		EventsStoreTypeData: pb.Subscribe_StartNewOnly,
	}
	if startSeq > 0 {
		sub.EventsStoreTypeData, sub.EventsStoreTypeValue = pb.Subscribe_StartAtSequence, int64(startSeq)
	}
	return c.subscribe(ctx, sub)
}

func (c *Conn) subscribe(ctx context.Context, sub *pb.Subscribe) (<-chan Event, error) {
	if sub.Channel == "" {
		return nil, errors.New("mq: subscribe: empty channel")
	}
	if err := c.isClosed(); err != nil {
		return nil, err
	}
	out := make(chan Event, 256)
	sctx, cancel := context.WithCancel(ctx)
	stopAfter := context.AfterFunc(c.life, cancel)
	if !c.spawn(func() {
		defer close(out)
		defer cancel()
		defer stopAfter()
		c.subscribeLoop(sctx, sub, out)
	}) {
		stopAfter()
		cancel()
		return nil, ErrClosed
	}
	return out, nil
}

// subscribeLoop keeps one subscription up until ctx ends.
func (c *Conn) subscribeLoop(ctx context.Context, sub *pb.Subscribe, out chan<- Event) {
	warn := lograte.New(c.log.With("channel", sub.Channel, "group", sub.Group), c.cfg.LogRepeatEvery)
	retry := c.newBackoff()
	var last uint64
	for ctx.Err() == nil {
		if last > 0 && sub.SubscribeTypeData == pb.Subscribe_EventsStore {
			sub.EventsStoreTypeData, sub.EventsStoreTypeValue = pb.Subscribe_StartAtSequence, int64(last+1)
		}
		err := c.ready(ctx)
		var stream pb.Kubemq_SubscribeToEventsClient
		if err == nil {
			stream, err = c.api.SubscribeToEvents(ctx, sub)
		}
		for err == nil {
			var ev *pb.EventReceive
			ev, err = stream.Recv()
			if err != nil {
				break
			}
			retry.Reset()
			e := Event{ID: ev.EventID, Channel: ev.Channel, Metadata: ev.Metadata, Body: ev.Body, Tags: ev.Tags, Sequence: ev.Sequence}
			if ev.Timestamp > 0 {
				e.Timestamp = unixAny(ev.Timestamp)
			}
			select {
			case out <- e:
				last = max(last, ev.Sequence)
			case <-ctx.Done():
				return
			}
		}
		if ctx.Err() != nil {
			return
		}
		warn.Warn("mq subscription lost, resubscribing", "err", classify("subscribe", err))
		sleep(ctx, retry.NextBackOff())
	}
}

// storeClientID is a client id an events store subscription can use: the
// connection's id with every character outside [A-Za-z0-9_-] replaced, the
// connection's random token and a number, unique even across connections
// and processes that reuse a client id (the real broker may hold a closed
// subscription's id for a while).
func storeClientID(id, token string, n int64) string {
	b := []byte(id)
	for i, ch := range b {
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '_') {
			b[i] = '_'
		}
	}
	return fmt.Sprintf("%s-%s-store-%d", b, token, n)
}
