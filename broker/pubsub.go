package broker

// Events, events store, commands and queries share this file's plumbing:
// the pubSub registry, the KubeMQ error texts, request validation, id
// generation and NATS-style channel matching. The RPCs live in events.go,
// events_store.go and queries.go.
//
// Slow subscribers. A sender never waits for a subscriber:
//   - events, commands and queries go into a bounded buffer per subscriber
//     (subscriberBuffer); when it is full the message is dropped for that
//     subscriber (a group tries its other members first) and counted. The real
//     broker also drops, after a 2 s wait per message, so clients already live
//     with it; a dropped query or command ends in the requester's timeout.
//   - events store subscribers read from the stored log through a cursor, so
//     a slow one lags behind instead of losing events; nothing is dropped
//     before the retention ends.
// No subscriber is ever disconnected for being slow.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	pb "github.com/kubemq-io/protobuf/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	// subscriberBuffer is how many events, commands or queries wait for one
	// slow subscriber before more are dropped for it.
	subscriberBuffer = 1024
	// storeMemberBuffer is how many stored events are handed ahead to one
	// events store subscriber; the rest wait in the store, not dropped.
	storeMemberBuffer = 256
)

// The error texts KubeMQ sends, word for word, so that a client matching on
// them (mq translates them into typed errors) behaves the same against this
// broker and the real one. They travel as gRPC status messages with
// codes.Internal, as the real broker sends them; they are not Go sentinels
// for callers of this package, hence no "broker: " prefix.
var (
	psErrClientID           = errors.New("Error 101: invalid clientID value, cannot be empty")
	psErrChannel            = errors.New("Error 102: invalid channel value, cannot be empty")
	psErrWildcards          = errors.New("Error 107: invalid channel value, no wildcards are allowed")
	psErrWhitespace         = errors.New("Error 108: invalid channel value, no white spaces are allowed")
	psErrTimeoutValue       = errors.New("Error 109: invalid set timeout value, cannot be 0 or negative")
	psErrMessageEmpty       = errors.New("Error 110: invalid message, cannot be empty")
	psErrStoreTypeUndefined = errors.New("Error 111: invalid subscription type, cannot be undefined or 0")
	psErrStartSequence      = errors.New("Error 112: invalid subscription type start at sequence value, cannot by 0 or negative")
	psErrStartAtTime        = errors.New("Error 113: invalid subscription type start at time value, cannot by 0 or negative")
	psErrStartAtDelta       = errors.New("Error 114: invalid subscription type start at time delta value, cannot by 0 or negative")
	psErrRequestEmpty       = errors.New("Error 115: invalid request, cannot be empty")
	psErrCacheTTL           = errors.New("Error 116: invalid cache ttl value, cannot be 0 or negative")
	psErrRequestID          = errors.New("Error 117: invalid request id, cannot be empty")
	psErrNotStoreType       = errors.New("Error 118: event store parameters were set but subscribe type is not event store")
	psErrEndSeparator       = errors.New("Error 119: invalid channel value, cannot end with `.`")
	psErrRequestType        = errors.New("Error 206: invalid request type")
	psErrSubscribeType      = errors.New("Error 207: invalid subscribe type")
	psErrRequestTimeout     = errors.New("Error 301: timeout for request message")
	// The NATS Streaming errors KubeMQ passes on for an events store
	// subscription (trap 15), before any of its own checks but Error 101.
	psErrStoreClientID  = errors.New("stan: invalid clientID: only alphanumeric and `-` or `_` characters allowed")
	psErrStoreClientDup = errors.New("stan: clientID already registered")
)

// psError is how the real broker returns its errors: codes.Internal with
// the bare text.
func psError(err error) error { return status.Error(codes.Internal, err.Error()) }

// psClosed answers calls that arrive while the server shuts down.
func psClosed() error { return status.Error(codes.Unavailable, ErrClosed.Error()) }

// pubSub holds events subscribers, events store channels, and command and
// query subscribers with the requests waiting for an answer. Its methods are
// safe for concurrent use; close ends every subscription.
type pubSub struct {
	opts *Options
	log  *slog.Logger
	ids  psIDs

	closed    chan struct{}
	closeOnce sync.Once

	// memberBuffer and storeBuffer are subscriberBuffer and
	// storeMemberBuffer; tests shrink them.
	memberBuffer int
	storeBuffer  int

	events   psRegistry[*pb.EventReceive]
	commands psRegistry[*pb.Request]
	queries  psRegistry[*pb.Request]

	storeMu sync.RWMutex
	stores  map[string]*storeChannel
	persist *persister // nil without a data dir; set before serving

	// storeClients are the client ids of the open events store
	// subscriptions, on every channel: one subscription per id at a time.
	storeClientsMu sync.Mutex
	storeClients   map[string]struct{}

	pendingMu sync.Mutex
	pending   map[string]chan *pb.Response // reply channel -> requester
}

func newPubSub(opts *Options) *pubSub {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &pubSub{
		opts:         opts,
		log:          log,
		ids:          newPSIDs(),
		closed:       make(chan struct{}),
		memberBuffer: subscriberBuffer,
		storeBuffer:  storeMemberBuffer,
		stores:       map[string]*storeChannel{},
		storeClients: map[string]struct{}{},
		pending:      map[string]chan *pb.Response{},
	}
}

// close ends every subscription stream and every waiting request. It is
// safe to call more than once.
func (p *pubSub) close() { p.closeOnce.Do(func() { close(p.closed) }) }

func (p *pubSub) isClosed() bool {
	select {
	case <-p.closed:
		return true
	default:
		return false
	}
}

// Subscribers reports how many subscriptions are open on channel, counting
// events, events store, commands and queries subscriptions made with exactly
// that channel name (a wildcard subscription counts under its pattern).
// Tests use it to wait until a subscription is active before they publish.
// It is safe for concurrent use.
func (s *Server) Subscribers(channel string) int {
	p := s.pubsub
	n := p.events.count(channel) + p.commands.count(channel) + p.queries.count(channel)
	p.storeMu.RLock()
	c := p.stores[channel]
	p.storeMu.RUnlock()
	if c != nil {
		n += c.members()
	}
	return n
}

// psIDs makes ids for events and requests sent without one, like the real
// broker does (it uses NATS nuids): a random prefix per server and a counter.
type psIDs struct {
	prefix string
	n      *atomic.Uint64
}

func newPSIDs() psIDs {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return psIDs{prefix: hex.EncodeToString(b[:]), n: new(atomic.Uint64)}
}

func (g psIDs) next() string { return g.prefix + strconv.FormatUint(g.n.Add(1), 36) }

// psValidateChannel applies the real broker's checks to a channel name, in
// its order. Wildcards are refused only when noWildcards is set. Control
// characters count as white space (doc.go).
func psValidateChannel(ch string, noWildcards bool) error {
	switch {
	case ch == "":
		return psErrChannel
	case strings.HasSuffix(ch, "."):
		return psErrEndSeparator
	case strings.Contains(ch, " "), hasControl(ch):
		return psErrWhitespace
	case noWildcards && psWildcard(ch):
		return psErrWildcards
	}
	return nil
}

func psWildcard(ch string) bool { return strings.ContainsAny(ch, "*>") }

// psMatch reports whether the NATS-style pattern matches channel:
// tokens split on '.', '*' matches one token, a final '>' one or more.
func psMatch(pattern, channel string) bool {
	for {
		ptok, prest, pmore := strings.Cut(pattern, ".")
		if ptok == ">" && !pmore {
			return channel != ""
		}
		ctok, crest, cmore := strings.Cut(channel, ".")
		if ptok != "*" && ptok != ctok {
			return false
		}
		if !pmore || !cmore {
			return !pmore && !cmore
		}
		pattern, channel = prest, crest
	}
}

// psSubscriber is one open events, commands or queries subscription stream.
type psSubscriber[T any] struct {
	ch       chan T
	clientID string
	dropped  atomic.Uint64
}

// offer hands v to the subscriber without waiting; false when its buffer
// is full.
func (s *psSubscriber[T]) offer(v T) bool {
	select {
	case s.ch <- v:
		return true
	default:
		return false
	}
}

// psTopic is every subscription made with one channel name or pattern.
type psTopic[T any] struct {
	plain  []*psSubscriber[T]
	groups map[string]*psGroup[T]
}

// psGroup is the members of one group on a topic; each message goes to
// one of them, round-robin, skipping members whose buffer is full.
type psGroup[T any] struct {
	members []*psSubscriber[T]
	next    atomic.Uint64
}

// registry routes events, commands or queries from a channel to the
// subscriptions whose channel or pattern matches it.
type psRegistry[T any] struct {
	mu     sync.RWMutex
	topics map[string]*psTopic[T] // exact channel names
	wild   map[string]*psTopic[T] // wildcard patterns
}

func (r *psRegistry[T]) add(pattern, group string, s *psSubscriber[T]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := &r.topics
	if psWildcard(pattern) {
		m = &r.wild
	}
	if *m == nil {
		*m = map[string]*psTopic[T]{}
	}
	t := (*m)[pattern]
	if t == nil {
		t = &psTopic[T]{}
		(*m)[pattern] = t
	}
	if group == "" {
		t.plain = append(t.plain, s)
		return
	}
	if t.groups == nil {
		t.groups = map[string]*psGroup[T]{}
	}
	g := t.groups[group]
	if g == nil {
		g = &psGroup[T]{}
		t.groups[group] = g
	}
	g.members = append(g.members, s)
}

func (r *psRegistry[T]) remove(pattern, group string, s *psSubscriber[T]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.topics
	if psWildcard(pattern) {
		m = r.wild
	}
	t := m[pattern]
	if t == nil {
		return
	}
	if group == "" {
		t.plain = psWithout(t.plain, s)
	} else if g := t.groups[group]; g != nil {
		g.members = psWithout(g.members, s)
		if len(g.members) == 0 {
			delete(t.groups, group)
		}
	}
	if len(t.plain) == 0 && len(t.groups) == 0 {
		delete(m, pattern)
	}
}

// psWithout returns list less s, in a new slice so that a publisher holding
// the old one under the read lock is not disturbed.
func psWithout[T comparable](list []T, s T) []T {
	out := make([]T, 0, len(list))
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

// publish hands v to every plain subscription matching channel and to one
// member of every matching group. It never waits. It returns how many
// subscriptions took v and how many were skipped for a full buffer.
func (r *psRegistry[T]) publish(channel string, v T) (delivered, dropped int) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if t := r.topics[channel]; t != nil {
		d, x := t.publish(v)
		delivered, dropped = delivered+d, dropped+x
	}
	for pattern, t := range r.wild {
		if psMatch(pattern, channel) {
			d, x := t.publish(v)
			delivered, dropped = delivered+d, dropped+x
		}
	}
	return delivered, dropped
}

func (t *psTopic[T]) publish(v T) (delivered, dropped int) {
	for _, s := range t.plain {
		if s.offer(v) {
			delivered++
		} else {
			s.dropped.Add(1)
			dropped++
		}
	}
	for _, g := range t.groups {
		n := uint64(len(g.members))
		start := g.next.Add(1) - 1
		taken := false
		for i := range n {
			if g.members[(start+i)%n].offer(v) {
				taken = true
				break
			}
		}
		if taken {
			delivered++
		} else {
			g.members[start%n].dropped.Add(1)
			dropped++
		}
	}
	return delivered, dropped
}

func (r *psRegistry[T]) count(pattern string) int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t := r.topics[pattern]
	if t == nil {
		t = r.wild[pattern]
	}
	if t == nil {
		return 0
	}
	n := len(t.plain)
	for _, g := range t.groups {
		n += len(g.members)
	}
	return n
}

// psServe registers a subscription, forwards what it receives to send until
// the stream ends or the server closes, and unregisters it.
func psServe[T any](p *pubSub, r *psRegistry[T], ctx context.Context, channel, group, clientID string, send func(T) error) error {
	s := &psSubscriber[T]{ch: make(chan T, p.memberBuffer), clientID: clientID}
	r.add(channel, group, s)
	defer func() {
		r.remove(channel, group, s)
		if n := s.dropped.Load(); n > 0 {
			p.log.Warn("slow psSubscriber dropped messages", "channel", channel, "group", group, "client_id", clientID, "dropped", n)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.closed:
			return psClosed()
		case v := <-s.ch:
			if err := send(v); err != nil {
				return err
			}
		}
	}
}
