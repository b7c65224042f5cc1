package crash

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferq/inferq/lograte"
	"github.com/inferq/inferq/mq"
)

// Events is the Events Store that carries the fleet's crash reports.
// *mq.Conn satisfies it (each of its store subscriptions gets a client id
// of its own, unique per process: KUBEMQ.md trap 15).
type Events interface {
	SendEventStore(ctx context.Context, channel string, body []byte, tags map[string]string) error
	SubscribeEventsStore(ctx context.Context, channel, group string, startSeq uint64) (<-chan mq.Event, error)
}

// DefaultHold is FleetConfig.Hold's default.
const DefaultHold = 10 * time.Second

// FleetConfig configures a Fleet.
type FleetConfig struct {
	// Events, when set, shares crash counts with the other replicas of
	// each queue: crash reports on the Events Store channel
	// <queue>.crashes (Channel). nil: no fleet (NewFleet returns nil), so
	// this process's journal alone counts.
	Events Events
	// Hold is how long a message with fleet crash reports waits before it
	// runs again, so that the replica that died running it last has time
	// to restart and report (default DefaultHold; negative: no wait).
	Hold time.Duration
	// Window is how long a crash report counts after it was published: at
	// most the broker's events store retention (default 1 h). TableMax
	// caps the messages with counts (default 10000).
	Window   time.Duration
	TableMax int
	// Reporter names this process in its reports (the worker's host
	// name): for logs and operators, not for counting.
	Reporter string
	// Key, when set, is the fleet key (at least MinKeyBytes; CheckKey;
	// the same on every replica of the queue): this process signs its
	// reports with it and counts only reports signed with it on the same
	// channel within Window; it refuses the others (unsigned, forged,
	// stale: a replay) and malformed ones, counts them with Refused and
	// logs them once a minute at most. nil: reports are neither signed
	// nor checked, and anyone who can publish on the channel can spend a
	// task's crash budget.
	Key []byte
	// Refused, when set, is called once per refused report with its
	// reason (RefusedMalformed, RefusedUnsigned, RefusedForged,
	// RefusedStale): a metric, inferq_crash_reports_refused_total. Without
	// a Key only malformed reports are refused.
	Refused func(reason string)
	// Now is the clock (default time.Now; tests).
	Now func() time.Time
	// Logger receives the fleet's logs; nil discards them.
	Logger *slog.Logger
}

func (c *FleetConfig) setDefaults() {
	if c.Hold == 0 {
		c.Hold = DefaultHold
	}
	if c.Window <= 0 {
		c.Window = defaultWindow
	}
	if c.TableMax <= 0 {
		c.TableMax = defaultTableMax
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Refused == nil {
		c.Refused = func(string) {}
	}
}

// Fleet shares crash counts between the replicas of a queue
// (DESIGN.md 4.5). A process that starts with crash counts in its journal
// publishes them, cumulative per journal, on each served queue's
// Channel (a process without counts publishes a report without any,
// and every process does again each quarter window: a heartbeat); every process reads those channels from the first event
// the broker keeps and sums the counts per message over journals
// (table). A message with a count runs alone, and goes to the dead
// letter queue once the count reaches max_retries + 1.
//
// A dead process's crash is known only once it restarts and reports, and
// the broker gives its message back at once, so a message with a count
// is held for FleetConfig.Hold before it runs again: the replica that ran
// it last (and died) has that long to restart and report. Without the hold two
// replicas could each rerun a message while the other's crash is still
// unreported. A process that has heard from no other journal within the
// window does not hold (alone, its journal knows every crash).
//
// Normal tasks cost nothing: reports are published at start only, and a
// lookup is a map read. With FleetConfig.Key, reports are signed and only
// signed ones count (sign.go). When the events store is away the local journal
// still counts this process's crashes (logged once; tasks never wait for
// it).
//
// A nil *Fleet is no fleet: Crashes returns the local count, HoldFor 0
// and Run returns at once. Its methods are safe for concurrent use.
type Fleet struct {
	ev          Events
	journal     *Journal
	table       *table
	hold        time.Duration
	channels    []string
	reporter    string
	incarnation string
	log         *slog.Logger
	rate        *lograte.Limiter // refusals and reports from the fleet: once a minute at most
	now         func() time.Time
	key         []byte // nil: reports neither signed nor checked
	window      time.Duration
	refusedFn   func(reason string)

	// caughtUp: this process read back its own first report, so it has
	// read every report published before it started (HoldFor).
	caughtUp atomic.Bool
	degraded atomic.Bool // a publish failed: logged once until one succeeds
}

// NewFleet returns the fleet crash counter of queues for journal (this
// process's), or nil when cfg has no Events or no queue has a valid crash
// channel.
func NewFleet(cfg FleetConfig, journal *Journal, queues []string) *Fleet {
	if cfg.Events == nil {
		return nil
	}
	cfg.setDefaults()
	log := cfg.Logger.With("component", "fleet-crashes")
	f := &Fleet{ev: cfg.Events, journal: journal, table: newTable(cfg.Window, cfg.TableMax),
		hold: cfg.Hold, reporter: cfg.Reporter, incarnation: newJournalID(), log: log, rate: lograte.New(log, time.Minute), now: cfg.Now,
		key: cfg.Key, window: cfg.Window, refusedFn: cfg.Refused}
	for _, q := range queues {
		ch, err := Channel(q)
		if err != nil {
			f.log.Warn("queue's crash count is not shared with the fleet (this process's journal still counts its own crashes)", "queue", q, "err", err)
			continue
		}
		f.channels = append(f.channels, ch)
	}
	if len(f.channels) == 0 {
		return nil
	}
	return f
}

// Crashes is msgID's crash count across the fleet, local being this
// process's journal's (Journal.Crashes). A nil f (no fleet) returns local.
func (f *Fleet) Crashes(msgID string, local int) int {
	if f == nil {
		return local
	}
	return f.table.crashes(Token(msgID), f.journal.ID(), local, f.now())
}

// HoldFor is how long a message with crashes waits before it runs again:
// 0 without a fleet, or once this process has read the channel up to its
// own first report and no other journal reported within the window (a
// replica alone: its journal is the whole story). Until it has read that
// far (the events store may be away) it cannot know, and holds.
func (f *Fleet) HoldFor() time.Duration {
	if f == nil || f.hold < 0 || f.caughtUp.Load() && !f.table.peers(f.journal.ID(), f.now()) {
		return 0
	}
	return f.hold
}

// Run subscribes to every crash channel and publishes the journal's
// recovered counts on each, then a heartbeat each quarter window, until
// ctx ends; it returns once its subscriptions are closed. A nil f returns
// at once.
func (f *Fleet) Run(ctx context.Context) {
	if f == nil {
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	reports := splitReports(f.journal.ID(), f.incarnation, f.reporter, f.journal.Recovered())
	heartbeat := splitReports(f.journal.ID(), f.incarnation, f.reporter, nil)
	for _, ch := range f.channels {
		// From sequence 1: the broker clamps it to the first event it
		// keeps (its retention), so every report still kept is read;
		// those older than the window are ignored (table.add).
		events, err := f.ev.SubscribeEventsStore(ctx, ch, "", 1)
		if err != nil {
			f.log.Error("crash reports of the fleet not read: this process counts only its own crashes", "channel", ch, "err", err)
		} else {
			wg.Add(1)
			go func() { defer wg.Done(); f.read(ch, events) }()
		}
		wg.Add(1)
		go func() { defer wg.Done(); f.publish(ctx, ch, reports); f.beat(ctx, ch, heartbeat) }()
	}
	f.expire(ctx)
}

// beat publishes a report without counts every quarter window until ctx
// ends, so that the other replicas know this one is there (HoldFor) for
// as long as it runs.
func (f *Fleet) beat(ctx context.Context, ch string, heartbeat []Report) {
	t := time.NewTicker(f.table.window / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f.publish(ctx, ch, heartbeat)
		}
	}
}

// read applies the reports of one channel until it closes. With a key, a
// report counts from the time it was signed (a replay is as old as the
// original); without one, from its event's timestamp.
func (f *Fleet) read(ch string, events <-chan mq.Event) {
	self := f.journal.ID()
	for ev := range events {
		r, err := DecodeReport(ev.Body)
		if err != nil {
			f.refuse(ch, ev, err)
			continue
		}
		at := ev.Timestamp
		if at.IsZero() {
			at = f.now()
		}
		if f.key != nil {
			if err := r.Verify(f.key, ch, f.now(), f.window); err != nil {
				f.refuse(ch, ev, err)
				continue
			}
			at = r.SignedAt()
		}
		grew := f.table.add(r, at, f.now())
		if r.Incarnation == f.incarnation {
			f.caughtUp.Store(true)
		}
		if grew > 0 && r.Journal != self {
			f.rate.Info("crash report from the fleet", "channel", ch, "reporter", r.Reporter, "journal", r.Journal,
				"incarnation", r.Incarnation, "messages", len(r.Crashes), "grew", grew)
		}
	}
}

// refuse counts a refused report by reason and logs it, once a minute at
// most (a flood of forgeries is one line a minute, with a count).
func (f *Fleet) refuse(ch string, ev mq.Event, err error) {
	reason := refusal(err)
	f.refusedFn(reason)
	f.rate.Warn("crash report refused", "channel", ch, "seq", ev.Sequence, "reason", reason, "err", err)
}

// publish sends reports on ch, retrying with backoff until each is stored
// or ctx ends. Reports are idempotent: a resend after a lost confirmation
// counts once.
func (f *Fleet) publish(ctx context.Context, ch string, reports []Report) {
reports:
	for _, r := range reports {
		wait := 500 * time.Millisecond
		for {
			if f.key != nil { // at each try: a report is as old as its signature
				r = r.Sign(f.key, ch, f.now())
			}
			body, err := r.Encode()
			if err != nil {
				f.log.Error("crash report not encoded", "err", err)
				continue reports
			}
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = f.ev.SendEventStore(sctx, ch, body, nil)
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			if !f.degraded.Swap(true) {
				f.log.Warn("crash report not published yet (events store away?); this process's journal still counts its crashes; retrying",
					"channel", ch, "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, 30*time.Second)
		}
		if f.degraded.Swap(false) {
			f.log.Info("crash report published after retries", "channel", ch)
		}
		if len(r.Crashes) > 0 {
			f.log.Info("crash report published", "channel", ch, "messages", len(r.Crashes), "journal", r.Journal)
		}
	}
}

// expire drops expired counts every minute until ctx ends.
func (f *Fleet) expire(ctx context.Context) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f.table.expire(f.now())
		}
	}
}
