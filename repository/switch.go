package repository

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/tensor"
)

// ErrNoVersion is Enqueue's error while a model has no version loaded.
var ErrNoVersion = errors.New("model has no version loaded")

// Instance is one loaded version of a model: its sessions behind a
// batcher. The Repository runs the batcher and closes the instance once
// the batcher stopped.
type Instance struct {
	Info    tensor.ModelInfo
	Batcher *batch.Batcher
	// MaxInFlight is the placement's bound (runtime.Placement.MaxInFlight);
	// 0 derives it from the config.
	MaxInFlight int
	// Devices name where its sessions run, for /v1/models.
	Devices []string
	// Close closes the sessions; it is called after the batcher's Run
	// returned, or instead of it. nil: nothing to close.
	Close func()
}

// served is an Instance of one version, with the requests it accepted
// and not yet finished.
type served struct {
	n       int64
	version string // n in decimal, the records' model_version
	inst    *Instance
	pending atomic.Int64
	stamp   Stamp
	cfgSum  string

	stop func()        // ends the batcher's Run (soft: it runs what it took)
	done chan struct{} // closed when Run returned
}

func newServed(n int64, inst *Instance, stamp Stamp, cfgSum string) *served {
	return &served{n: n, version: strconv.FormatInt(n, 10), inst: inst, stamp: stamp, cfgSum: cfgSum, done: make(chan struct{})}
}

// Switch is the consumer.Batcher of a repository model: it sends each
// request to the version serving at that moment and tells the request
// which (batch.Request.Version), and counts what each version accepted
// and has not finished, so that a version being replaced is stopped only
// once it ran all of it. Safe for concurrent use.
type Switch struct {
	mu  sync.RWMutex
	cur *served
}

// Enqueue hands r to the serving version's batcher.
func (s *Switch) Enqueue(ctx context.Context, r *batch.Request) error {
	s.mu.RLock()
	v := s.cur
	if v != nil {
		v.pending.Add(1) // under the lock: set replaces cur only after
	}
	s.mu.RUnlock()
	if v == nil {
		return ErrNoVersion
	}
	r.Version = v.version
	inner := r.Owner
	r.Owner = &countingOwner{inner: inner, v: v}
	if err := v.inst.Batcher.Enqueue(ctx, r); err != nil {
		r.Owner = inner
		v.pending.Add(-1)
		return err
	}
	return nil
}

// Flush flushes the serving version's batcher (batch.Batcher.Flush).
func (s *Switch) Flush() {
	s.mu.RLock()
	v := s.cur
	s.mu.RUnlock()
	if v != nil {
		v.inst.Batcher.Flush()
	}
}

// Serving is the version taking requests, "" when none.
func (s *Switch) Serving() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.cur == nil {
		return ""
	}
	return s.cur.version
}

// set makes v (nil: none) take the requests from now on and returns the
// version it replaces. Once set returns, no Enqueue hands anything more
// to the old one: what it holds is counted in its pending.
func (s *Switch) set(v *served) (old *served) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, s.cur = s.cur, v
	return old
}

// countingOwner counts a request out of its version once finished.
type countingOwner struct {
	inner batch.Owner
	v     *served
}

func (o *countingOwner) RunStarting(r *batch.Request) { o.inner.RunStarting(r) }

func (o *countingOwner) Finished(r *batch.Request) {
	o.inner.Finished(r)
	o.v.pending.Add(-1)
}
