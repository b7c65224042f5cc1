package results

import (
	"context"
	"sync"
)

// taskLocks serialises the broker writes of one task (Put and replay) so that
// a task's records reach the broker in the order they were stored, while
// writes of different tasks never wait on each other.
type taskLocks struct {
	mu sync.Mutex
	m  map[string]*taskLock
}

type taskLock struct {
	ch   chan struct{} // holds a token while locked
	refs int           // lockers holding or waiting; guarded by taskLocks.mu
}

// lock waits for the task's lock or ctx; the returned func releases it.
func (l *taskLocks) lock(ctx context.Context, id string) (func(), error) {
	l.mu.Lock()
	if l.m == nil {
		l.m = make(map[string]*taskLock)
	}
	tl := l.m[id]
	if tl == nil {
		tl = &taskLock{ch: make(chan struct{}, 1)}
		l.m[id] = tl
	}
	tl.refs++
	l.mu.Unlock()

	select {
	case tl.ch <- struct{}{}:
		return func() { <-tl.ch; l.release(id, tl) }, nil
	case <-ctx.Done():
		l.release(id, tl)
		return nil, ctx.Err()
	}
}

func (l *taskLocks) release(id string, tl *taskLock) {
	l.mu.Lock()
	tl.refs--
	if tl.refs == 0 {
		delete(l.m, id)
	}
	l.mu.Unlock()
}
