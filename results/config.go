package results

import (
	"fmt"
	"log/slog"
	"time"
)

// Config configures a Store. Zero fields take the defaults documented on
// each; New calls Validate.
type Config struct {
	// Broker is where records go. Required.
	Broker Broker
	// Logger receives the store's logs; nil discards them.
	Logger *slog.Logger
	// LogRepeatEvery is the most often one repeated warning (a write
	// retrying or spooled, a replay failing, while the broker is away; the
	// disk spool full) is logged; the record counts the ones dropped in
	// between ("repeated"). Default 1 min.
	LogRepeatEvery time.Duration
	// DataDir holds the disk spool. Required unless MemoryOnly.
	DataDir string
	// MemoryOnly keeps the spool in memory only, an explicit choice (New
	// logs a warning): records the broker has not taken when the process
	// ends are lost, and the memory bounds alone make the spool full.
	// Exclusive with DataDir.
	MemoryOnly bool
	// BrokerAway reports whether a temporary write error means the broker
	// itself is away (unreachable, connection lost, no answer in time):
	// the replay pass then stops and waits ReplayBackoff. Any other
	// temporary error is the record's own (its channel failing): the pass
	// moves on and that task alone waits. nil counts every temporary
	// error as the broker away.
	BrokerAway func(error) bool

	// ResultPrefix prefixes the compat channel: <prefix><task_id>.
	// Default "rayserve-result-".
	ResultPrefix string
	// Expiry is the expiration of compat records, ours and the Python
	// producer's PENDING. Default 3600 s.
	Expiry time.Duration
	// ExpiryMargin: the old record is not removed once its expiry is this
	// close, because a receive that meets only an expired record swallows the
	// next message (KUBEMQ.md trap 8). Default 60 s (covers clock skew and the
	// receive's own wait).
	ExpiryMargin time.Duration
	// MaxResultBytes is the largest body sent to the broker; a larger one is
	// kept whole in the spool and the broker gets Entry.Substitute.
	// Default 4 MiB (the Python adapter's send limit).
	MaxResultBytes int

	// Retries is the number of retries after a failed broker write before
	// the record is spooled. 0 means the default 3; negative means none.
	Retries int
	// RetryBackoff is the wait between retries. Default 1 s.
	RetryBackoff time.Duration
	// RemoveWait is the wait of a removal's peek on an empty compat channel
	// (it is not empty after the record's send unless a purge emptied it).
	// Default 1 s (the broker's floor).
	RemoveWait time.Duration
	// RemoveConcurrency bounds the removals in flight. Default 64.
	RemoveConcurrency int

	// SpoolEntries bounds the records whose bytes the spool keeps in
	// memory. Copies of records on disk and held oversize records give up
	// their room first; once records kept in memory only (no data dir, or
	// the disk refused them) reach the bound, the spool is full (Full):
	// no record is dropped, the worker stops taking tasks instead.
	// Default 10 000.
	SpoolEntries int
	// SpoolMemoryBytes bounds the bytes of those records, alike.
	// Default 1 GiB.
	SpoolMemoryBytes int64
	// SpoolDiskBytes bounds the disk spool. Held oversize records leave the
	// disk, oldest first, to make room for records the broker does not
	// have; when those alone do not fit, the spool is full. Default 4 GiB.
	SpoolDiskBytes int64
	// CacheEntries bounds the cache of recently stored records. Default 10 000.
	CacheEntries int
	// CacheBytes bounds the bytes of that cache. Default 256 MiB.
	CacheBytes int64

	// ReplayBackoff is the first wait after a replay pass met a broker
	// error; it doubles up to ReplayBackoffMax. Defaults 1 s and 30 s.
	ReplayBackoff    time.Duration
	ReplayBackoffMax time.Duration
	// FlushRetry is that wait once Flush is called, instead of the
	// growing one, so that a broker back during a stop's flush is met in
	// time. Default ReplayBackoff.
	FlushRetry time.Duration
	// ReplayConcurrency bounds the tasks replayed at once. Default 16.
	ReplayConcurrency int

	// Now is the clock; nil means time.Now. For tests.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	setDefault(&c.LogRepeatEvery, time.Minute)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	setDefault(&c.ResultPrefix, "rayserve-result-")
	setDefault(&c.Expiry, 3600*time.Second)
	setDefault(&c.ExpiryMargin, 60*time.Second)
	setDefault(&c.MaxResultBytes, 4<<20)
	setDefault(&c.Retries, 3)
	if c.Retries < 0 {
		c.Retries = 0
	}
	setDefault(&c.RetryBackoff, time.Second)
	setDefault(&c.RemoveWait, time.Second)
	setDefault(&c.RemoveConcurrency, 64)
	setDefault(&c.SpoolEntries, 10000)
	setDefault(&c.SpoolMemoryBytes, 1<<30)
	setDefault(&c.SpoolDiskBytes, 4<<30)
	setDefault(&c.CacheEntries, 10000)
	setDefault(&c.CacheBytes, 256<<20)
	setDefault(&c.ReplayBackoff, time.Second)
	setDefault(&c.ReplayBackoffMax, 30*time.Second)
	setDefault(&c.FlushRetry, c.ReplayBackoff)
	setDefault(&c.ReplayConcurrency, 16)
	if c.Now == nil {
		c.Now = time.Now
	}
}

func setDefault[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// Validate reports the first field that cannot work once the defaults are
// applied (to a copy: c is not changed).
func (c Config) Validate() error {
	c.setDefaults()
	switch {
	case c.Broker == nil:
		return fmt.Errorf("%w: broker is required", ErrInvalidConfig)
	case c.DataDir == "" && !c.MemoryOnly:
		return fmt.Errorf("%w: no data dir: give one, or choose the memory-only spool explicitly (records are lost at exit)", ErrInvalidConfig)
	case c.DataDir != "" && c.MemoryOnly:
		return fmt.Errorf("%w: data dir %s given with the memory-only spool", ErrInvalidConfig, c.DataDir)
	case c.Expiry < time.Second:
		return fmt.Errorf("%w: expiry %s is under 1s", ErrInvalidConfig, c.Expiry)
	case c.ExpiryMargin < 0 || c.ExpiryMargin >= c.Expiry:
		return fmt.Errorf("%w: expiry_margin %s must be in [0, expiry)", ErrInvalidConfig, c.ExpiryMargin)
	case c.MaxResultBytes < 0:
		return fmt.Errorf("%w: max_result_bytes %d is negative", ErrInvalidConfig, c.MaxResultBytes)
	case c.RetryBackoff < 0 || c.RemoveWait < 0 || c.ReplayBackoff < 0 || c.FlushRetry < 0:
		return fmt.Errorf("%w: negative backoff or wait", ErrInvalidConfig)
	case c.ReplayBackoffMax < c.ReplayBackoff:
		return fmt.Errorf("%w: replay_backoff_max %s is under replay_backoff %s", ErrInvalidConfig, c.ReplayBackoffMax, c.ReplayBackoff)
	case c.RemoveConcurrency < 1 || c.ReplayConcurrency < 1:
		return fmt.Errorf("%w: concurrency must be at least 1", ErrInvalidConfig)
	case c.SpoolEntries < 1 || c.SpoolMemoryBytes < 1 || c.SpoolDiskBytes < 1 || c.CacheEntries < 1 || c.CacheBytes < 1:
		return fmt.Errorf("%w: spool and cache bounds must be positive", ErrInvalidConfig)
	}
	return nil
}
