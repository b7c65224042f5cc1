package consumer

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferq/inferq/mq"
)

// CrashEvents is the Events Store that carries the fleet's crash reports.
// *mq.Conn satisfies it (each of its store subscriptions gets a client id
// of its own, unique per process: KUBEMQ.md trap 15).
type CrashEvents interface {
	SendEventStore(ctx context.Context, channel string, body []byte, tags map[string]string) error
	SubscribeEventsStore(ctx context.Context, channel, group string, startSeq uint64) (<-chan mq.Event, error)
}

// DefaultCrashHold is Config.CrashHold's default.
const DefaultCrashHold = 10 * time.Second

// fleetCrashes shares crash counts between the replicas of a queue
// (DESIGN.md 4.5). A process that starts with crash counts in its journal
// publishes them, cumulative per journal, on each served queue's
// CrashChannel (a process without counts publishes a report without any,
// and every process does again each quarter window: a heartbeat); every process reads those channels from the first event
// the broker keeps and sums the counts per message over journals
// (crashTable). A message with a count runs alone, and goes to the dead
// letter queue once the count reaches max_retries + 1.
//
// A dead process's crash is known only once it restarts and reports, and
// the broker gives its message back at once, so a message with a count
// is held for CrashHold before it runs again: the replica that ran it last
// (and died) has that long to restart and report. Without the hold two
// replicas could each rerun a message while the other's crash is still
// unreported. A process that has heard from no other journal within the
// window does not hold (alone, its journal knows every crash).
//
// Normal tasks cost nothing: reports are published at start only, and a
// lookup is a map read. When the events store is away the local journal
// still counts this process's crashes (logged once; tasks never wait for
// it).
type fleetCrashes struct {
	ev          CrashEvents
	journal     *Journal
	table       *crashTable
	hold        time.Duration
	channels    []string
	reporter    string
	incarnation string
	log         *slog.Logger
	now         func() time.Time

	// caughtUp: this process read back its own first report, so it has
	// read every report published before it started (holdFor).
	caughtUp atomic.Bool
	degraded atomic.Bool // a publish failed: logged once until one succeeds
	refused  atomic.Bool // a malformed report was refused: logged once
}

// newFleetCrashes returns the fleet crash counter for queues, or nil when
// cfg has no CrashEvents or no queue has a valid crash channel.
func newFleetCrashes(cfg Config, journal *Journal, queues []string, log *slog.Logger) *fleetCrashes {
	if cfg.CrashEvents == nil {
		return nil
	}
	f := &fleetCrashes{ev: cfg.CrashEvents, journal: journal, table: newCrashTable(cfg.CrashWindow, cfg.CrashTableMax),
		hold: cfg.CrashHold, reporter: cfg.Worker, incarnation: newJournalID(), log: log.With("component", "fleet-crashes"), now: cfg.Now}
	if f.hold == 0 {
		f.hold = DefaultCrashHold
	}
	for _, q := range queues {
		ch, err := CrashChannel(q)
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

// crashes is msgID's crash count across the fleet, local being this
// process's journal's. A nil f (no fleet) returns local.
func (f *fleetCrashes) crashes(msgID string, local int) int {
	if f == nil {
		return local
	}
	return f.table.crashes(journalToken(msgID), f.journal.ID(), local, f.now())
}

// holdFor is how long a message with crashes waits before it runs again:
// 0 without a fleet, or once this process has read the channel up to its
// own first report and no other journal reported within the window (a
// replica alone: its journal is the whole story). Until it has read that
// far (the events store may be away) it cannot know, and holds.
func (f *fleetCrashes) holdFor() time.Duration {
	if f == nil || f.hold < 0 || f.caughtUp.Load() && !f.table.peers(f.journal.ID(), f.now()) {
		return 0
	}
	return f.hold
}

// run subscribes to every crash channel and publishes the journal's
// recovered counts on each, until ctx ends; wg tracks its goroutines.
func (f *fleetCrashes) run(ctx context.Context, wg *sync.WaitGroup) {
	if f == nil {
		return
	}
	reports := crashReports(f.journal.ID(), f.incarnation, f.reporter, f.journal.Recovered())
	heartbeat := crashReports(f.journal.ID(), f.incarnation, f.reporter, nil)
	for _, ch := range f.channels {
		// From sequence 1: the broker clamps it to the first event it
		// keeps (its retention), so every report still kept is read;
		// those older than the window are ignored (crashTable.add).
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
	wg.Add(1)
	go func() { defer wg.Done(); f.expire(ctx) }()
}

// beat publishes a report without counts every quarter window until ctx
// ends, so that the other replicas know this one is there (holdFor) for
// as long as it runs.
func (f *fleetCrashes) beat(ctx context.Context, ch string, heartbeat []CrashReport) {
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

// read applies the reports of one channel until it closes.
func (f *fleetCrashes) read(ch string, events <-chan mq.Event) {
	self := f.journal.ID()
	for ev := range events {
		r, err := DecodeCrashReport(ev.Body)
		if err != nil {
			if !f.refused.Swap(true) {
				f.log.Warn("malformed crash report refused (logged once)", "channel", ch, "seq", ev.Sequence, "err", err)
			}
			continue
		}
		at := ev.Timestamp
		if at.IsZero() {
			at = f.now()
		}
		grew := f.table.add(r, at, f.now())
		if r.Incarnation == f.incarnation {
			f.caughtUp.Store(true)
		}
		if grew > 0 && r.Journal != self {
			f.log.Info("crash report from the fleet", "channel", ch, "reporter", r.Reporter, "journal", r.Journal,
				"incarnation", r.Incarnation, "messages", len(r.Crashes), "grew", grew)
		}
	}
}

// publish sends reports on ch, retrying with backoff until each is stored
// or ctx ends. Reports are idempotent: a resend after a lost confirmation
// counts once.
func (f *fleetCrashes) publish(ctx context.Context, ch string, reports []CrashReport) {
	for _, r := range reports {
		body, err := r.Encode()
		if err != nil {
			f.log.Error("crash report not encoded", "err", err)
			continue
		}
		wait := 500 * time.Millisecond
		for {
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
func (f *fleetCrashes) expire(ctx context.Context) {
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
