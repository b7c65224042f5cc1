package broker

import (
	"context"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/kubemq-io/protobuf/go"
)

// An events store channel keeps every event sent to it for
// Options.Retention, numbered from 1 like KubeMQ (which keeps them in NATS
// Streaming). A subscription is a cursor into that log: it starts where its
// start policy says, replays from there and then follows new events in
// order. Subscribers that share a group share one cursor, and each event goes
// to one member. Senders never wait: they append, and hand events to the
// members that have room; a member that has fallen behind refills itself from
// the log as it drains, so nothing is dropped for a slow subscriber.
//
// Differences from the real broker, on purpose: a group's cursor lives while
// the group has members (KubeMQ keeps a durable one named after channel and
// group, so a group that comes back resumes where it was; here it starts
// again from its start policy); expired events are removed lazily, when the
// channel is next written or subscribed to.
//
// Client ids, as the real broker (its NATS Streaming) checks them, before
// any check but Error 101: only [A-Za-z0-9_-], and one open subscription
// per client id across every channel and group; the id is free again once
// that subscription's stream ends. Sending events to the store, and events
// subscriptions, take any client id.

// storeChannel is one events store channel.
type storeChannel struct {
	bounds  eventBounds
	persist *persister // nil without a data dir

	mu    sync.Mutex
	first uint64 // sequence of log[0]; last+1 while the log is empty
	last  uint64 // last sequence given out; 0 before the first event
	// published is the last sequence subscribers may see: last, but with
	// a data dir only events on disk (and those before them), so that no
	// subscriber sees an event that a crash could take back.
	published uint64
	lastTS    int64 // timestamps never go back, so a time search can bisect
	log       []*pb.EventReceive
	bytes     int64                    // eventBytes of log
	groups    map[string]*storeGroup   // named groups
	solo      map[*storeGroup]struct{} // subscribers without a group
}

// storeGroup is one cursor: a named group's, or a lone subscriber's.
type storeGroup struct {
	name      string // "" for a lone subscriber
	cursor    uint64 // next sequence to hand out
	redeliver []*pb.EventReceive
	members   []*storeMember
	next      int // round-robin position
	// behind is set when events waited in the log because every member's
	// buffer was full; a member that drains its buffer then refills it.
	behind atomic.Bool
}

// storeMember is one subscription stream of a storeGroup.
type storeMember struct {
	ch chan *pb.EventReceive
	g  *storeGroup
}

// storeChannel returns the events store channel name, creating it.
func (p *pubSub) storeChannel(name string) *storeChannel {
	p.storeMu.RLock()
	c := p.stores[name]
	p.storeMu.RUnlock()
	if c != nil {
		return c
	}
	p.storeMu.Lock()
	defer p.storeMu.Unlock()
	if c = p.stores[name]; c == nil {
		c = p.newStoreChannel()
		p.stores[name] = c
	}
	return c
}

func (p *pubSub) newStoreChannel() *storeChannel {
	return &storeChannel{
		bounds:  eventBounds{retention: p.opts.Retention, maxEvents: p.opts.EventsStoreMaxEvents, maxBytes: p.opts.EventsStoreMaxBytes},
		persist: p.persist,
		first:   1,
		groups:  map[string]*storeGroup{},
		solo:    map[*storeGroup]struct{}{},
	}
}

// eventBounds are what an events store channel keeps: events younger than
// retention, at most maxEvents of them and at most maxBytes (eventBytes) in
// all, the newest event always; a bound <= 0 is no bound.
type eventBounds struct {
	retention time.Duration
	maxEvents int
	maxBytes  int64
}

// drop returns how many of the oldest of n events (bytes in all; at gives
// the i-th, oldest first) fall outside the bounds.
func (b eventBounds) drop(n int, bytes int64, now time.Time, at func(int) *pb.EventReceive) int {
	oldest := now.Add(-b.retention).UnixNano()
	i := 0
	for ; i < n; i++ {
		e := at(i)
		old := b.retention > 0 && e.Timestamp < oldest
		many := b.maxEvents > 0 && n-i > b.maxEvents
		big := b.maxBytes > 0 && bytes > b.maxBytes && n-i > 1
		if !old && !many && !big {
			break
		}
		bytes -= eventBytes(e)
	}
	return i
}

// eventBytes is the size of e counted against the bytes bound: its body,
// metadata and tags.
func eventBytes(e *pb.EventReceive) int64 {
	n := len(e.Body) + len(e.Metadata)
	for k, v := range e.Tags {
		n += len(k) + len(v)
	}
	return int64(n)
}

// append stores ev with the next sequence number and, without a data dir,
// hands it to the channel's subscriptions that have room. With one it
// returns the sequence to publish once the event is on disk.
func (c *storeChannel) append(ev *pb.Event, now time.Time) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := max(now.UnixNano(), c.lastTS)
	c.lastTS = ts
	c.last++
	e := &pb.EventReceive{
		EventID:   ev.EventID,
		Channel:   ev.Channel,
		Metadata:  ev.Metadata,
		Body:      ev.Body,
		Timestamp: ts,
		Sequence:  c.last,
		Tags:      ev.Tags,
	}
	c.log = append(c.log, e)
	c.bytes += eventBytes(e)
	c.evict(now)
	if c.persist != nil {
		c.persist.event(e)
		return c.last
	}
	c.published = c.last
	c.dispatchAll()
	return c.last
}

// publish lets subscribers see the events up to seq, now on disk.
func (c *storeChannel) publish(seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if seq > c.published {
		c.published = seq
		c.dispatchAll()
	}
}

// dispatchAll hands every cursor its next events. c.mu is held.
func (c *storeChannel) dispatchAll() {
	for _, g := range c.groups {
		c.dispatch(g)
	}
	for g := range c.solo {
		c.dispatch(g)
	}
}

// evict drops the oldest events while they are past the retention or the
// channel holds more than its bounds allow. c.mu is held.
func (c *storeChannel) evict(now time.Time) {
	i := c.bounds.drop(len(c.log), c.bytes, now, func(i int) *pb.EventReceive { return c.log[i] })
	if i == 0 {
		return
	}
	for j := range i {
		c.bytes -= eventBytes(c.log[j])
		c.log[j] = nil
	}
	c.first += uint64(i)
	if i == len(c.log) {
		c.log = nil
		return
	}
	c.log = c.log[i:]
}

// dispatch hands g's next events to its members while they have room.
// c.mu is held.
func (c *storeChannel) dispatch(g *storeGroup) {
	for len(g.redeliver) > 0 {
		if !g.offer(g.redeliver[0]) {
			g.behind.Store(true)
			return
		}
		g.redeliver[0] = nil
		g.redeliver = g.redeliver[1:]
	}
	g.cursor = max(g.cursor, c.first)
	for g.cursor <= c.published {
		if !g.offer(c.log[g.cursor-c.first]) {
			g.behind.Store(true)
			return
		}
		g.cursor++
	}
	g.behind.Store(false)
}

// offer gives e to the next member, round-robin, that has room.
func (g *storeGroup) offer(e *pb.EventReceive) bool {
	n := len(g.members)
	for i := range n {
		k := (g.next + i) % n
		select {
		case g.members[k].ch <- e:
			g.next = (k + 1) % n
			return true
		default:
		}
	}
	return false
}

// join adds a subscription to the channel. A new group, or a subscriber
// without one, starts where req's start policy says; a member joining an
// existing group shares its cursor and its policy is ignored, as in NATS
// Streaming queue groups.
func (c *storeChannel) join(req *pb.Subscribe, buffer int, now time.Time) *storeMember {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evict(now)
	var g *storeGroup
	if req.Group != "" {
		g = c.groups[req.Group]
	}
	if g == nil {
		g = &storeGroup{name: req.Group, cursor: c.start(req, now)}
		if g.name != "" {
			c.groups[g.name] = g
		} else {
			c.solo[g] = struct{}{}
		}
	}
	m := &storeMember{ch: make(chan *pb.EventReceive, buffer), g: g}
	g.members = append(g.members, m)
	c.dispatch(g)
	return m
}

// leave removes m. Events handed to m and not yet sent go back to the rest
// of its group.
func (c *storeChannel) leave(m *storeMember) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := m.g
	g.members = psWithout(g.members, m)
	if len(g.members) == 0 {
		if g.name != "" {
			delete(c.groups, g.name)
		} else {
			delete(c.solo, g)
		}
		return
	}
	var held []*pb.EventReceive
	for len(m.ch) > 0 {
		held = append(held, <-m.ch)
	}
	if len(held) > 0 {
		g.redeliver = append(held, g.redeliver...)
		c.dispatch(g)
	}
}

// refill tops up g's members after one of them drained its buffer.
func (c *storeChannel) refill(g *storeGroup, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evict(now)
	c.dispatch(g)
}

// start is the first sequence a new cursor hands out under req's policy.
// c.mu is held.
func (c *storeChannel) start(req *pb.Subscribe, now time.Time) uint64 {
	next := c.last + 1
	v := req.EventsStoreTypeValue
	switch req.EventsStoreTypeData {
	case pb.Subscribe_StartFromFirst:
		return c.first
	case pb.Subscribe_StartFromLast:
		if c.last >= c.first {
			return c.last
		}
		return next
	case pb.Subscribe_StartAtSequence:
		// Out of range starts are clamped, as NATS Streaming does: before
		// the first kept event means the first, past the last means new
		// events only.
		return min(max(uint64(v), c.first), next)
	case pb.Subscribe_StartAtTime:
		return c.seqAt(v)
	case pb.Subscribe_StartAtTimeDelta:
		if v >= math.MaxInt64/int64(time.Second) {
			return c.first
		}
		return c.seqAt(now.Add(-time.Duration(v) * time.Second).UnixNano())
	default:
		// StartNewOnly, and values KubeMQ does not know, which NATS
		// Streaming also treats as new only.
		return next
	}
}

// seqAt is the sequence of the first kept event stamped at or after ts.
// c.mu is held.
func (c *storeChannel) seqAt(ts int64) uint64 {
	i := sort.Search(len(c.log), func(i int) bool { return c.log[i].Timestamp >= ts })
	return c.first + uint64(i)
}

// members counts the channel's open subscriptions.
func (c *storeChannel) members() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, g := range c.groups {
		n += len(g.members)
	}
	for g := range c.solo {
		n += len(g.members)
	}
	return n
}

// subscribeStore checks an events store subscription the way the real
// broker does, in its order (client id present, client id characters, client
// id free, then the channel and start policy), and serves it.
func (p *pubSub) subscribeStore(ctx context.Context, req *pb.Subscribe, send func(*pb.EventReceive) error) error {
	if req.ClientID == "" {
		return psError(psErrClientID)
	}
	if !psStoreClientIDValid(req.ClientID) {
		return psError(psErrStoreClientID)
	}
	if !p.claimStoreClient(req.ClientID) {
		return psError(psErrStoreClientDup)
	}
	defer p.releaseStoreClient(req.ClientID)
	if err := psValidateSubscribe(req, true); err != nil {
		return psError(err)
	}
	return p.serveStore(ctx, req, send)
}

// psStoreClientIDValid reports whether id is non-empty and made of ASCII
// letters, digits, '-' and '_' only, as NATS Streaming requires.
func psStoreClientIDValid(id string) bool {
	if id == "" {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// claimStoreClient records id as subscribed, or reports false when an open
// events store subscription already uses it.
func (p *pubSub) claimStoreClient(id string) bool {
	p.storeClientsMu.Lock()
	defer p.storeClientsMu.Unlock()
	if _, taken := p.storeClients[id]; taken {
		return false
	}
	p.storeClients[id] = struct{}{}
	return true
}

// releaseStoreClient frees id for a later subscription.
func (p *pubSub) releaseStoreClient(id string) {
	p.storeClientsMu.Lock()
	defer p.storeClientsMu.Unlock()
	delete(p.storeClients, id)
}

// serveStore runs one events store subscription stream: it joins the
// channel, sends what the cursor hands it until the stream ends or the
// server closes, and leaves.
func (p *pubSub) serveStore(ctx context.Context, req *pb.Subscribe, send func(*pb.EventReceive) error) error {
	c := p.storeChannel(req.Channel)
	m := c.join(req, p.storeBuffer, time.Now())
	defer c.leave(m)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.closed:
			return psClosed()
		case e := <-m.ch:
			if err := send(e); err != nil {
				return err
			}
			if m.g.behind.Load() && len(m.ch) <= cap(m.ch)/2 {
				c.refill(m.g, time.Now())
			}
		}
	}
}

// restore loads the events a data dir kept (Open, before serving).
func (p *pubSub) restore(logs map[string]*eventLog) {
	p.storeMu.Lock()
	defer p.storeMu.Unlock()
	for name, el := range logs {
		c := p.newStoreChannel()
		c.last, c.published = el.last, el.last
		c.first = el.last + 1
		if len(el.events) > 0 {
			c.first = el.events[0].Sequence
			c.lastTS = el.events[len(el.events)-1].Timestamp
		}
		c.log = el.events
		for _, e := range el.events {
			c.bytes += eventBytes(e)
		}
		p.stores[name] = c
	}
}
