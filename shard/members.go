package shard

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/inferq/inferq/mq"
)

// Events is what Members needs of the broker; *mq.Conn satisfies it.
type Events interface {
	SendEvent(ctx context.Context, channel string, body []byte, tags map[string]string) error
	SubscribeEvents(ctx context.Context, channel, group string) (<-chan mq.Event, error)
}

// TagLeaving marks a member's last heartbeat: it is going away.
const TagLeaving = "leaving"

// MembersChannel is the events channel where the replicas of queue
// announce themselves.
func MembersChannel(queue string) string { return queue + ".members" }

// Members tracks the replicas consuming one queue: each publishes its id
// on the queue's members channel (plain events, not stored) every Beat,
// and one that stops publishes a last one marked leaving. A member not
// heard from for 5 x Beat is gone: long enough that a replica slowed by a
// saturated host is not taken for a dead one (its shards would then be
// polled twice). Members is safe for concurrent use.
type Members struct {
	ev      Events
	channel string
	self    string
	beat    time.Duration
	log     *slog.Logger

	mu      sync.Mutex
	seen    map[string]time.Time
	started time.Time // when Run subscribed; zero before
	changed chan struct{}
}

// NewMembers returns the tracker of queue's replicas for the member self
// (an id of [A-Za-z0-9_-], unique per process). beat <= 0 means 1 s.
func NewMembers(ev Events, queue, self string, beat time.Duration, log *slog.Logger) (*Members, error) {
	if err := validID(self); err != nil {
		return nil, err
	}
	if beat <= 0 {
		beat = time.Second
	}
	return &Members{ev: ev, channel: MembersChannel(queue), self: self, beat: beat, log: log,
		seen: map[string]time.Time{}, changed: make(chan struct{}, 1)}, nil
}

// Self is this member's id.
func (m *Members) Self() string { return m.self }

// expiry is how long a member stays without a heartbeat.
func (m *Members) expiry() time.Duration { return 5 * m.beat }

// Changed is signalled when the live members change, and once when the
// tracker is ready (see Ready).
func (m *Members) Changed() <-chan struct{} { return m.changed }

// Ready reports whether the tracker has listened long enough (two beats)
// to have heard every live member.
func (m *Members) Ready() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.started.IsZero() && time.Since(m.started) >= 2*m.beat
}

// Live are the members heard from within the expiry, self included, sorted.
func (m *Members) Live() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.liveLocked(time.Now())
}

func (m *Members) liveLocked(now time.Time) []string {
	out := []string{m.self}
	for id, at := range m.seen {
		if id != m.self && now.Sub(at) <= m.expiry() {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

func (m *Members) signal() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// Run subscribes to the members channel and beats until ctx ends, then
// publishes its leaving (within a second) and returns. A subscription
// that fails leaves the tracker knowing only itself, which then owns
// every shard: consumed twice rather than not at all.
func (m *Members) Run(ctx context.Context) {
	events, err := m.ev.SubscribeEvents(ctx, m.channel, "")
	if err != nil {
		m.log.Error("queue shard members not tracked: this replica takes every shard", "channel", m.channel, "err", err)
	}
	m.mu.Lock()
	m.started = time.Now()
	m.mu.Unlock()
	var wg sync.WaitGroup
	if events != nil {
		wg.Add(1)
		go func() { defer wg.Done(); m.read(events) }()
	}
	t := time.NewTicker(m.beat)
	defer t.Stop()
	ready := time.After(2 * m.beat)
	m.send(ctx, false)
	for {
		select {
		case <-ctx.Done():
			lctx, cancel := context.WithTimeout(context.Background(), time.Second)
			m.send(lctx, true)
			cancel()
			wg.Wait()
			return
		case <-ready:
			m.signal()
		case <-t.C:
			m.send(ctx, false)
			m.expire()
		}
	}
}

func (m *Members) send(ctx context.Context, leaving bool) {
	var tags map[string]string
	if leaving {
		tags = map[string]string{TagLeaving: "1"}
	}
	if err := m.ev.SendEvent(ctx, m.channel, []byte(m.self), tags); err != nil && ctx.Err() == nil {
		m.log.Debug("queue shard heartbeat not sent", "channel", m.channel, "err", err)
	}
}

// read applies heartbeats until the subscription ends.
func (m *Members) read(events <-chan mq.Event) {
	for ev := range events {
		id, leaving, err := DecodeBeat(ev.Body, ev.Tags)
		if err != nil || id == m.self {
			continue
		}
		m.mu.Lock()
		before := m.liveLocked(time.Now())
		if leaving {
			delete(m.seen, id)
		} else {
			m.seen[id] = time.Now()
		}
		after := m.liveLocked(time.Now())
		m.mu.Unlock()
		if !slices.Equal(before, after) {
			m.log.Info("queue shard members changed", "channel", m.channel, "members", after)
			m.signal()
		}
	}
}

// expire forgets members not heard from within the expiry.
func (m *Members) expire() {
	m.mu.Lock()
	now := time.Now()
	var gone []string
	for id, at := range m.seen {
		if now.Sub(at) > m.expiry() {
			delete(m.seen, id)
			gone = append(gone, id)
		}
	}
	live := m.liveLocked(now)
	m.mu.Unlock()
	if len(gone) > 0 {
		m.log.Warn("queue shard member silent, taken as gone: its shards pass to the others", "channel", m.channel,
			"gone", gone, "silent_for", m.expiry(), "members", live)
		m.signal()
	}
}

// DecodeBeat reads a heartbeat: the body is the member's id, a leaving
// tag marks its last one.
func DecodeBeat(body []byte, tags map[string]string) (id string, leaving bool, err error) {
	id = string(body)
	if err := validID(id); err != nil {
		return "", false, err
	}
	return id, tags[TagLeaving] == "1", nil
}
