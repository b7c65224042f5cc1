// Package lograte rate-limits repeated log records: during a broker outage
// every retry of every record would otherwise log the same warning. A
// Limiter logs the first record of a message at once, then at most one per
// interval, that one carrying "repeated": how many records of the message it
// dropped since the last one it logged.
package lograte

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Limiter rate-limits records by message (the constant message text, which
// names the event; attributes do not count). Use one Limiter per component
// whose records must not hide each other's (one per poller, one per store).
// Its methods are safe for concurrent use. The zero value is not usable;
// make one with New.
type Limiter struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time // test seam

	mu   sync.Mutex
	msgs map[string]*seen
}

type seen struct {
	last    time.Time // when a record of the message was last logged
	dropped int       // records dropped since
}

// New returns a Limiter that logs to log (discarded when nil) at most one
// record of a message per every (1 minute when every <= 0).
func New(log *slog.Logger, every time.Duration) *Limiter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if every <= 0 {
		every = time.Minute
	}
	return &Limiter{log: log, every: every, now: time.Now, msgs: map[string]*seen{}}
}

// Warn logs a warning through Log.
func (l *Limiter) Warn(msg string, args ...any) {
	l.Log(context.Background(), slog.LevelWarn, msg, args...)
}

// Info logs an informational record through Log.
func (l *Limiter) Info(msg string, args ...any) {
	l.Log(context.Background(), slog.LevelInfo, msg, args...)
}

// Log logs the record when it is the message's first, or the first after
// the interval passed since the message's last logged record, adding
// "repeated" (the records dropped meanwhile) when there were any; otherwise
// it drops it and counts it.
func (l *Limiter) Log(ctx context.Context, level slog.Level, msg string, args ...any) {
	if !l.log.Enabled(ctx, level) {
		return
	}
	now := l.now()
	l.mu.Lock()
	s := l.msgs[msg]
	if s == nil {
		s = &seen{}
		l.msgs[msg] = s
	} else if now.Sub(s.last) < l.every {
		s.dropped++
		l.mu.Unlock()
		return
	}
	dropped := s.dropped
	s.last, s.dropped = now, 0
	l.mu.Unlock()
	if dropped > 0 {
		args = append(args, slog.Int("repeated", dropped))
	}
	l.log.Log(ctx, level, msg, args...)
}

// Reset forgets msg, so that its next record is logged at once: call it
// when the condition the message reports has cleared (the broker is back),
// so that the next outage is logged from its start.
func (l *Limiter) Reset(msg string) {
	l.mu.Lock()
	delete(l.msgs, msg)
	l.mu.Unlock()
}
