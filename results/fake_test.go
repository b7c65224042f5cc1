package results

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// The fake's errors: a refusal for good is a backoff.Permanent error, as
// the Broker contract asks.
var (
	errUnavailable    = errors.New("fake: broker unavailable")
	errTooLarge       = backoff.Permanent(errors.New("fake: message too large"))
	errChannelFailing = errors.New("fake: this channel keeps failing")
	errBadChannel     = backoff.Permanent(errors.New("fake: invalid channel name"))
)

type fakeMsg struct {
	body    []byte
	expires time.Time
	ours    bool   // sent by SendQueue, the Store's own record
	write   string // the write that sent it, when ours
}

type fakeEvent struct {
	body []byte
	tags map[string]string
}

// fakeBroker keeps queues and events store channels in memory. It models
// trap 8: a removal that meets only expired messages makes the channel
// swallow the next message sent to it. RemoveOld removes the oldest
// message when the Store sent it in another write, or when a producer's
// body does not start with "CANCELLED" (a final record, left) or
// "FOREIGN" (no record, left). A removal that finds the channel empty
// counts in emptyWaits: the real broker's peek waits out its whole wait
// (at least 1 s) there.
type fakeBroker struct {
	now func() time.Time

	mu         sync.Mutex
	queues     map[string][]fakeMsg
	events     map[string][]fakeEvent
	swallow    map[string]bool
	swallowed  int
	down       bool           // every call fails with errUnavailable
	failNext   int            // the next n calls fail with errUnavailable
	failWith   error          // every send fails with this error
	failCh     string         // event sends to this channel fail with failChErr
	failChErr  error          // errChannelFailing when nil
	writeFail  map[string]int // failed event sends by channel
	ops        []string       // "remove ch", "send ch", "event ch", in call order
	calls      int            // calls, failed ones included
	emptyWaits int            // RemoveOld calls that met an empty channel
	receiving  int            // RemoveOld calls in flight
	maxRecv    int            // most RemoveOld calls seen in flight at once
	block      chan struct{}  // when set, RemoveOld waits for it to close
	onCall     func()         // called (without mu) at the start of every call
}

func newFakeBroker() *fakeBroker {
	return &fakeBroker{
		now:     time.Now,
		queues:  make(map[string][]fakeMsg),
		events:  make(map[string][]fakeEvent),
		swallow: make(map[string]bool),
	}
}

func (f *fakeBroker) enter(op string) error {
	if f.onCall != nil {
		f.onCall()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.down {
		return errUnavailable
	}
	if f.failNext > 0 {
		f.failNext--
		return errUnavailable
	}
	f.ops = append(f.ops, op)
	return nil
}

func (f *fakeBroker) SendEventStore(ctx context.Context, ch string, body []byte, tags map[string]string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := f.enter("event " + ch); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return f.failWith
	}
	if ch == f.failCh {
		if f.writeFail == nil {
			f.writeFail = make(map[string]int)
		}
		f.writeFail[ch]++
		if f.failChErr != nil {
			return f.failChErr
		}
		return errChannelFailing
	}
	f.events[ch] = append(f.events[ch], fakeEvent{body: bytes.Clone(body), tags: maps.Clone(tags)})
	return nil
}

func (f *fakeBroker) SendQueue(ctx context.Context, ch string, body []byte, expiry time.Duration, write string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := f.enter("send " + ch); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return f.failWith
	}
	if f.swallow[ch] {
		delete(f.swallow, ch)
		f.swallowed++
		return nil
	}
	f.queues[ch] = append(f.queues[ch], fakeMsg{body: bytes.Clone(body), expires: f.now().Add(expiry), ours: true, write: write})
	return nil
}

func (f *fakeBroker) RemoveOld(ctx context.Context, ch string, wait time.Duration, write string, max int) (Old, int, error) {
	for n := range max {
		old, err := f.removeOne(ctx, ch, write)
		if err != nil || old != OldRemoved {
			return old, n, err
		}
	}
	return OldRemoved, max, nil
}

// removeOne is one step of RemoveOld: it removes the oldest message when the
// write supersedes it.
func (f *fakeBroker) removeOne(ctx context.Context, ch string, write string) (Old, error) {
	if err := ctx.Err(); err != nil {
		return OldNone, err
	}
	if err := f.enter("remove " + ch); err != nil {
		return OldNone, err
	}
	f.mu.Lock()
	f.receiving++
	f.maxRecv = max(f.maxRecv, f.receiving)
	block := f.block
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.receiving--
		f.mu.Unlock()
	}()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return OldNone, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queues[ch]
	now := f.now()
	live := q[:0:0]
	for _, m := range q {
		if now.Before(m.expires) {
			live = append(live, m)
		}
	}
	if len(live) == 0 {
		f.emptyWaits++
		if len(q) > 0 {
			f.swallow[ch] = true // trap 8
		}
		f.queues[ch] = nil
		return OldNone, nil
	}
	f.queues[ch] = live
	switch head := live[0]; {
	case head.ours && head.write == write:
		return OldOwn, nil
	case !head.ours && bytes.HasPrefix(head.body, []byte("CANCELLED")):
		return OldFinal, nil
	case !head.ours && bytes.HasPrefix(head.body, []byte("FOREIGN")):
		return OldKept, nil
	}
	f.queues[ch] = live[1:]
	return OldRemoved, nil
}

// put writes a message as a producer would (the adapter's PENDING).
func (f *fakeBroker) put(ch string, body string, expires time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queues[ch] = append(f.queues[ch], fakeMsg{body: []byte(body), expires: expires})
}

// queue returns the live bodies of a queue channel, oldest first.
func (f *fakeBroker) queue(ch string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, m := range f.queues[ch] {
		if f.now().Before(m.expires) {
			out = append(out, string(m.body))
		}
	}
	return out
}

func (f *fakeBroker) eventBodies(ch string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, e := range f.events[ch] {
		out = append(out, string(e.body))
	}
	return out
}

func (f *fakeBroker) set(fn func(f *fakeBroker)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeBroker) get(fn func(f *fakeBroker)) { f.set(fn) }

func (f *fakeBroker) opsOf(prefix string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, op := range f.ops {
		if len(op) >= len(prefix) && op[:len(prefix)] == prefix {
			out = append(out, op)
		}
	}
	return out
}

// logBuf is a goroutine-safe log sink for tests that look at logs.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// testConfig is a fast Config with a memory-only spool: no waits between
// retries or replay passes; errUnavailable is the broker away, any other
// temporary error the record's own.
func testConfig(b Broker) Config {
	return Config{
		Broker:           b,
		MemoryOnly:       true,
		BrokerAway:       func(err error) bool { return errors.Is(err, errUnavailable) },
		RetryBackoff:     time.Nanosecond,
		ReplayBackoff:    time.Millisecond,
		ReplayBackoffMax: 5 * time.Millisecond,
	}
}

func newStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// runStore starts Run and stops it at cleanup, checking it returned nil.
func runStore(t *testing.T, s *Store) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func rec(id, status string) []byte {
	return fmt.Appendf(nil, `{"task_id":%q,"status":%q}`, id, status)
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func slogTo(w *logBuf) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }
