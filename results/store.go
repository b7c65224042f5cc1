package results

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/inferq/inferq/lograte"
)

// ErrNotFlushed is returned by Close when spooled records exist only in
// memory (no data dir, or the disk refused them): they are lost at exit.
var ErrNotFlushed = errors.New("results: spooled records not on disk")

// Store writes result records to the broker, falling back to a spool it
// replays. Put, Get and Stats are safe for concurrent use by any number of
// goroutines; Run is called once; Close once, after Run returned.
type Store struct {
	cfg       Config
	log       *slog.Logger
	warn      *lograte.Limiter // repeated warnings: retries, spooling, replay failures
	broker    Broker
	spool     *spool
	cache     *cache
	locks     taskLocks
	removeSem chan struct{} // bounds removal receives in flight
	kick      chan struct{} // wakes Run when a record was spooled
	draining  chan struct{} // closed by Flush: Run retries an away broker every FlushRetry
	drainOnce sync.Once

	retries, spooled, replayed, parked, withheld atomic.Uint64

	mu       sync.RWMutex // guards closed against inflight.Add
	closed   bool
	inflight sync.WaitGroup
}

// New validates cfg and returns a Store. With a data dir it creates the
// directory and loads the records a previous process spooled there; Run
// replays them and Get answers from them at once.
func New(cfg Config) (*Store, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Store{
		cfg: cfg, log: cfg.Logger, warn: lograte.New(cfg.Logger, cfg.LogRepeatEvery), broker: cfg.Broker,
		cache:     newCache(cfg.CacheEntries, cfg.CacheBytes),
		removeSem: make(chan struct{}, cfg.RemoveConcurrency),
		kick:      make(chan struct{}, 1),
		draining:  make(chan struct{}),
	}
	var d *disk
	if cfg.DataDir != "" {
		d = &disk{dir: cfg.DataDir}
	} else {
		s.log.Warn("result spool in memory only: records the broker has not taken are lost when the process ends; give a data dir to keep them",
			"max_entries", cfg.SpoolEntries, "max_memory_bytes", cfg.SpoolMemoryBytes)
	}
	s.spool = newSpool(cfg.Logger, cfg.LogRepeatEvery, d, cfg.SpoolEntries, cfg.SpoolMemoryBytes, cfg.SpoolDiskBytes)
	if d != nil {
		recs, bad, err := d.load()
		if err != nil {
			return nil, fmt.Errorf("results: load spool %s: %w", cfg.DataDir, err)
		}
		for _, err := range bad {
			s.log.Error("result spool file unreadable; renamed *.bad", "err", err)
		}
		s.spool.restore(recs)
		if st := s.spool.stats(); st.pending+st.held+st.undeliverable > 0 {
			s.log.Info("result spool loaded", "dir", cfg.DataDir, "pending", st.pending, "held", st.held, "undeliverable", st.undeliverable)
		}
	}
	return s, nil
}

// Put stores e and returns nil once the record is in the broker or in the
// spool, so the caller may then ack the task's message. It never returns a
// broker error: a write that fails after Config.Retries retries (1 s apart
// by default), or whose ctx ends first, is spooled and replayed by Run; a
// write the broker refuses for good is kept apart as undeliverable, for
// lookups (logged, counted). The spool takes the record even when it is
// full (see Full): nothing finished is dropped to make room. A record
// of a task that still has spooled records is spooled behind them, so a
// task's records reach the broker in order.
//
// The compat channel takes terminal records only: a non-terminal record
// without ReplyTo is kept for Get and not sent.
//
// Put errors are ErrInvalidEntry and ErrClosed. It is safe for concurrent
// use; calls for different tasks never wait on each other, calls for one
// task are serialised.
func (s *Store) Put(ctx context.Context, e Entry) error {
	if err := e.validate(s.cfg.MaxResultBytes); err != nil {
		return err
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	s.inflight.Add(1)
	s.mu.RUnlock()
	defer s.inflight.Done()

	if e.ReplyTo == "" && !e.Terminal {
		s.cache.put(e.TaskID, e.Body, false)
		return nil
	}
	unlock, err := s.locks.lock(ctx, e.TaskID)
	if err != nil {
		s.toSpool(e, false, fmt.Errorf("wait for the task's earlier write: %w", err))
		return nil
	}
	defer unlock()
	if s.spool.hasPending(e.TaskID) {
		s.toSpool(e, false, errors.New("the task has records waiting for replay"))
		return nil
	}
	// The broker may deliver the record (or an oversize one's substitute,
	// with its result_ref) before it answers this write, and the producer
	// may look the record up at once: from here on the recent cache
	// answers for it. A record over the cache's byte bound waits for
	// stored's spool copy.
	s.cache.put(e.TaskID, e.Body, e.Terminal)
	removed := false
	err = s.writeRetry(ctx, e, &removed)
	switch {
	case err == nil:
		s.stored(e)
	case permanent(err):
		s.spool.add(e, stateUndeliverable, removed)
		s.parked.Add(1)
		s.warn.Log(ctx, slog.LevelError, msgUndeliverable, "entry", e, "err", err)
	default:
		s.toSpool(e, removed, err)
	}
	return nil
}

// writeRetry is one broker write with the configured retries, RetryBackoff
// apart. It returns the last write's error as the broker gave it (a
// permanent one still marked), not backoff's view of it.
func (s *Store) writeRetry(ctx context.Context, e Entry, removed *bool) error {
	// The first try needs no retry machinery (backoff.Retry allocates its
	// options, back-off and timer): a write that succeeds, the common case
	// thousands of times a second, costs only itself.
	last := s.writeOnce(ctx, e, removed)
	var permanent *backoff.PermanentError
	if last == nil || s.cfg.Retries == 0 || errors.As(last, &permanent) || ctx.Err() != nil {
		return last
	}
	s.warn.Warn("result write failed; retrying", "entry", e, "attempt", 1, "err", last)
	if sleep(ctx, s.cfg.RetryBackoff) != nil {
		return last
	}
	attempt := 1
	_, _ = backoff.Retry(ctx, func() (struct{}, error) {
		if attempt++; attempt > 1 {
			s.retries.Add(1)
		}
		last = s.writeOnce(ctx, e, removed)
		return struct{}{}, last
	},
		backoff.WithBackOff(backoff.NewConstantBackOff(s.cfg.RetryBackoff)),
		backoff.WithMaxTries(uint(s.cfg.Retries)),
		backoff.WithMaxElapsedTime(0),
		backoff.WithNotify(func(err error, _ time.Duration) {
			s.warn.Warn("result write failed; retrying", "entry", e, "attempt", attempt, "err", err)
		}))
	return last
}

// stored notes a record the broker now holds: an oversize one stays whole
// in the spool for lookups (the cache, which Put filled, may evict it).
func (s *Store) stored(e Entry) {
	if e.oversize(s.cfg.MaxResultBytes) {
		s.spool.add(e, stateHeld, true)
	}
}

func (s *Store) toSpool(e Entry, removed bool, why error) {
	s.spool.add(e, statePending, removed)
	s.spooled.Add(1)
	s.warn.Warn("result spooled for replay", "entry", e, "err", why)
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Get returns the task's stored record, whole, from the spool or from the
// cache of recently stored records: a terminal record before a non-terminal
// one. ok is false when neither holds it (it may still be in the broker).
// Safe for concurrent use; it may read one file of the disk spool.
func (s *Store) Get(taskID string) (body []byte, ok bool) {
	sb, st, sok := s.spool.lookup(taskID)
	cb, ct, cok := s.cache.get(taskID)
	if sok && (st || !ct) {
		return sb, true
	}
	if cok {
		return cb, true
	}
	return nil, false
}

// Stats is a snapshot of a Store's counters.
type Stats struct {
	// Retries counts broker write retries by Put
	// (inferq_result_store_retries_total).
	Retries uint64
	// Pending is the number of records waiting for replay
	// (inferq_result_spool_entries).
	Pending int
	// Held is the number of whole oversize records kept for lookups while
	// the broker holds their substitute.
	Held int
	// Undeliverable is the number of records the broker refused for good,
	// kept apart for lookups and never sent again
	// (inferq_result_spool_undeliverable).
	Undeliverable int
	// MemoryOnly is the number of pending and undeliverable records whose
	// bytes are in memory only: no data dir, or the disk refused them
	// (inferq_result_spool_memory_only).
	MemoryOnly int
	// DiskBytes is the disk spool's size, reservations included.
	DiskBytes int64
	// Full reports the spool full (see Store.Full;
	// inferq_result_spool_full).
	Full bool
	// Spooled counts records Put sent to the spool for replay.
	Spooled uint64
	// Replayed counts spooled records Run wrote to the broker.
	Replayed uint64
	// Parked counts records the broker refused for good (each became
	// undeliverable; inferq_result_store_undeliverable_total).
	Parked uint64
	// Dropped counts records lost because their spool file was corrupt or
	// gone (renamed *.bad, logged at error level;
	// inferq_result_spool_lost_total). The spool never drops a record to
	// make room.
	Dropped uint64
	// Evicted counts held oversize records dropped to make room for
	// records the broker does not have (inferq_result_spool_evicted_total).
	Evicted uint64
	// DiskErrors counts failed disk spool writes and reads
	// (inferq_result_spool_disk_errors_total).
	DiskErrors uint64
	// Withheld counts records that went to their compat channel behind
	// another writer's final record, the producer's CANCELLED, where no
	// reader sees them (inferq_result_store_withheld_total); each is kept
	// for lookups.
	Withheld uint64
}

// Stats returns the counters. Safe for concurrent use; cheap enough for a
// Prometheus CounterFunc or GaugeFunc.
func (s *Store) Stats() Stats {
	sp := s.spool.stats()
	return Stats{
		Retries: s.retries.Load(), Pending: sp.pending, Held: sp.held, Undeliverable: sp.undeliverable,
		MemoryOnly: sp.memOnly, DiskBytes: sp.diskBytes, Full: sp.full,
		Spooled: s.spooled.Load(), Replayed: s.replayed.Load(), Parked: s.parked.Load(),
		Dropped: sp.dropped, Evicted: sp.evicted, DiskErrors: sp.diskErrs, Withheld: s.withheld.Load(),
	}
}

// Full reports whether the spool is full: records the broker does not have
// fill the memory bounds (SpoolEntries, SpoolMemoryBytes) with no disk to
// take them, or the disk bound (SpoolDiskBytes) or the device refused one.
// While it is full the caller must take no new work whose records it
// would store (the consumer stops polling; readiness is false); Put still
// takes every record, beyond the bounds, and never drops one. It turns
// false once the replay, or the disk, has made room. Safe for concurrent
// use; cheap (one atomic load).
func (s *Store) Full() bool { return s.spool.full.Load() }

// Close refuses new Puts, waits for those in flight (they end when their
// ctx does, spooling what they hold), then writes spooled records held only
// in memory to the data dir. It returns ErrNotFlushed when records the
// broker does not have (pending or undeliverable) would be lost at exit. Call it after Run returned; calling it
// again only flushes again.
func (s *Store) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.inflight.Wait(); close(done) }()
	var waitErr error
	select {
	case <-done:
	case <-ctx.Done():
		waitErr = fmt.Errorf("results: close: puts still in flight: %w", ctx.Err())
	}
	_, left := s.spool.flush(true, false)
	if left == 0 {
		return waitErr
	}
	if s.cfg.DataDir == "" {
		return errors.Join(waitErr, fmt.Errorf("%w: %d records the broker does not have and no data dir", ErrNotFlushed, left))
	}
	return errors.Join(waitErr, fmt.Errorf("%w: %d records the broker does not have could not be written to %s", ErrNotFlushed, left, s.cfg.DataDir))
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
