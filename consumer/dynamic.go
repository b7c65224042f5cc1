package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Models that come and go while the server runs (a model repository's,
// see package repository): AddModel starts a model's queue consumer and
// query subscription (or joins the queue it shares), RemoveModel stops
// them once what they took is settled. The routing tables are replaced
// whole (copy on write), so the paths that read them take no lock.

// dynamic is the server's running state that AddModel and RemoveModel
// change.
type dynamic struct {
	mu      sync.Mutex
	ctx     context.Context // Run's, once it runs; nil before
	stopped bool            // Run is stopping: no queue starts
	pollers sync.WaitGroup
	queries sync.WaitGroup
	errs    []error
	models  []*Model // every model, in the order added
}

// queueList is the queues consumed now.
func (s *Server) queueList() []*queue {
	s.dyn.mu.Lock()
	defer s.dyn.mu.Unlock()
	return slices.Clone(s.queues)
}

// modelList is the models served now, in the order added.
func (s *Server) modelList() []Model {
	s.dyn.mu.Lock()
	defer s.dyn.mu.Unlock()
	if s.dyn.models == nil {
		out := make([]Model, len(s.cfg.Models))
		copy(out, s.cfg.Models)
		return out
	}
	out := make([]Model, len(s.dyn.models))
	for i, m := range s.dyn.models {
		out[i] = *m
	}
	return out
}

// startQueues starts every queue's poller and query subscription under
// ctx (Run's).
func (s *Server) startQueues(ctx context.Context) {
	s.dyn.mu.Lock()
	defer s.dyn.mu.Unlock()
	s.dyn.ctx = ctx
	if s.dyn.models == nil {
		for i := range s.cfg.Models {
			s.dyn.models = append(s.dyn.models, &s.cfg.Models[i])
		}
	}
	for _, q := range s.queues {
		s.startQueue(q)
	}
}

// startQueue runs q's poller and query subscription until Run's ctx ends
// or RemoveModel stops q. Called with dyn.mu held, after startQueues.
func (s *Server) startQueue(q *queue) {
	ctx, cancel := context.WithCancel(s.dyn.ctx)
	q.stop = cancel
	done := make(chan struct{})
	s.dyn.pollers.Add(1)
	if len(q.chans) == 1 {
		q.chans[0].runs.Add(1)
	}
	go func() {
		defer s.dyn.pollers.Done()
		defer close(done)
		if len(q.chans) == 1 {
			s.runChannel(ctx, q, q.chans[0])
			return
		}
		s.runShards(ctx, q)
	}()
	s.subscribeQueries(ctx, q, &s.dyn.queries)
	stop := q.stop
	q.stop = func() { stop(); <-done }
}

// waitQueues waits, once Run's ctx ended, for the pollers (each returns
// once what it delivered is settled, or after DrainTimeout) and then the
// query subscriptions, and returns the pollers' errors.
func (s *Server) waitQueues() error {
	s.dyn.mu.Lock()
	s.dyn.stopped = true
	s.dyn.mu.Unlock()
	s.dyn.pollers.Wait()
	s.dyn.queries.Wait()
	s.dyn.mu.Lock()
	defer s.dyn.mu.Unlock()
	return errors.Join(s.dyn.errs...)
}

// AddModel serves m from now on: from its queue (a queue of its own gets
// a poller and a query subscription, a shared one routes m's task_name to
// it too), by HTTP, with its metrics. The name must be new. Before Run,
// Run starts the new queue with the others.
func (s *Server) AddModel(m Model) error {
	if m.Batcher == nil {
		return fmt.Errorf("consumer: model %q: no batcher", m.Config.Name)
	}
	if m.Version == "" {
		m.Version = "1"
	}
	m.met = s.met.forModel(m.Config.Name)
	s.dyn.mu.Lock()
	defer s.dyn.mu.Unlock()
	if s.dyn.stopped {
		return fmt.Errorf("consumer: model %q: the server is stopping", m.Config.Name)
	}
	all := s.models.Load()
	if _, served := all.Model(m.Config.Name); served {
		return fmt.Errorf("consumer: model %q is served already", m.Config.Name)
	}
	if s.dyn.models == nil {
		for i := range s.cfg.Models {
			s.dyn.models = append(s.dyn.models, &s.cfg.Models[i])
		}
	}
	pm := &m
	var q *queue
	for _, cand := range s.queues {
		if cand.name == m.Config.Queue {
			q = cand
		}
	}
	if q == nil {
		q = newQueue(m.Config.Queue, s.cfg.QueueShards)
		if err := s.newPollers(q); err != nil {
			return err
		}
		s.queues = append(s.queues, q)
		if s.dyn.ctx != nil {
			s.startQueue(q)
		}
	}
	pm.pol = s.policy(pm, q)
	q.table.Store(q.table.Load().With(pm))
	s.models.Store(all.With(pm))
	s.dyn.models = append(s.dyn.models, pm)
	s.log.Info("model added", "model", m.Config.Name, "queue", q.name, "version", m.Version)
	return nil
}

// RemoveModel stops serving the model called name: its queue, when no
// other model shares it, stops polling and its query subscription ends;
// what was taken runs and is settled first (within DrainTimeout; the
// rest goes back to the queue). Tasks not taken stay on the broker. On a
// shared queue its tasks are unknown from now on. It returns once the
// queue stopped, or when ctx ends first.
func (s *Server) RemoveModel(ctx context.Context, name string) error {
	s.dyn.mu.Lock()
	all := s.models.Load()
	m, served := all.Model(name)
	if !served {
		s.dyn.mu.Unlock()
		return fmt.Errorf("consumer: model %q is not served", name)
	}
	if s.dyn.models == nil {
		for i := range s.cfg.Models {
			s.dyn.models = append(s.dyn.models, &s.cfg.Models[i])
		}
	}
	var stop func()
	for i, q := range s.queues {
		if q.name != m.Config.Queue {
			continue
		}
		left := q.table.Load().Without(name)
		if len(left.Models()) > 0 {
			q.table.Store(left)
			break
		}
		s.queues = slices.Delete(s.queues, i, i+1)
		stop = q.stop
		if stop == nil {
			stop = func() {}
		}
		break
	}
	s.models.Store(all.Without(name))
	s.dyn.models = slices.DeleteFunc(s.dyn.models, func(x *Model) bool { return x == m })
	s.dyn.mu.Unlock()
	if stop != nil {
		done := make(chan struct{})
		go func() { stop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("consumer: model %q: its queue is still draining: %w", name, ctx.Err())
		}
		s.met.QueueDepth.DeleteLabelValues(m.Config.Queue)
	}
	s.met.Inflight.DeleteLabelValues(name)
	s.met.Pending.DeleteLabelValues(name)
	s.log.Info("model removed", "model", name, "queue", m.Config.Queue)
	return nil
}

// servingReporter is a Batcher that switches between model versions (a
// model repository's) and says which one takes requests now.
type servingReporter interface{ Serving() string }

// Serving is the version that takes m's requests now: its batcher's, else
// m.Version. Safe for concurrent use.
func (m *Model) Serving() string {
	if r, ok := m.Batcher.(servingReporter); ok {
		if v := r.Serving(); v != "" {
			return v
		}
	}
	return m.Version
}
