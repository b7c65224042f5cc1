package mq

import "time"

// The Poller's decisions as a pure step: nextStep reads what the Poller
// knows at one moment (a pollView: its state, the broker's last answers and
// the time) and says what to do (a pollStep). Run's loop (poller_loop.go)
// takes the view, carries the step out and takes a new view for the next
// decision. Nothing here calls the broker, reads a clock or takes a lock.

// pollPhase is where the Poller stands when it asks for a decision.
type pollPhase uint8

const (
	atTurn      pollPhase = iota // a turn of the loop begins: are kept settlements due?
	atGate                       // may it poll now; with nothing known waiting, how it looks
	atWatch                      // it watches (no batch of its own runs): count, follow or peek?
	atStrays                     // the count after a completion came back: count again?
	atPeeked                     // a peek came back
	atLooked                     // a look found messages: may it still poll them?
	atAsk                        // a stream client is ready: how many to poll
	atPolled                     // a poll came back: follow the queue?
	atDelivered                  // its batch was delivered: count again?
	atCount                      // a count came back: what is known to be waiting
	atAside                      // a count taken aside came back: take it?
	atKeptSent                   // kept settlements went out: check that they stranded nothing?
	atKeptCount                  // the check's count came back: a quiet close or a loud one?
	atSettled                    // a batch's last message was settled: keep its settlements?
)

// pollAct is what a pollStep has the Poller do.
type pollAct uint8

const (
	actNone       pollAct = iota // nothing (more) now
	actGoOn                      // go on: get a client and poll, or report messages seen
	actWait                      // wait for a settlement, at most wait (0: no bound)
	actSendKept                  // send the kept settlements (loop.closeDeferred)
	actKeep                      // keep the batch's settlements for a quiet moment
	actCount                     // count the queue (QueuesInfo), wait first
	actCountAside                // count in the background (loop.countAside)
	actWatch                     // watch the idle queue (loop.watch)
	actFollow                    // poll the next task at once, without a peek
	actPeek                      // peek, giving up after wait (0: PeekWait)
	actPoll                      // stream-poll n
)

// pollView is what the Poller's decisions read, copied at one moment.
type pollView struct {
	at  pollPhase
	now time.Time
	cfg *PollerConfig

	// Run's loop (see loop).
	known, found                 int
	counted, counting, following bool
	quiet, closing               bool
	looked, countedAt            time.Time
	polledDone                   int64  // the completion the last poll knew of (unix ns)
	short                        bool   // atWatch on: a batch completed since the last watch
	recounts                     int    // atStrays: counts made again
	asked, got                   int    // atPolled, atDelivered: the poll's ask and answer
	beside                       bool   // atDelivered: it was made beside an open batch
	gaps                         int64  // sequences below the highest received, not received
	seenMax                      uint64 // the highest sequence received

	// The Poller's (Poller.mu).
	inflight, held           int
	holdingOpen, strayedOpen int
	lastDone                 int
	overlapped               bool
	overlappedAt             time.Time
	runningSince             time.Time // the oldest open batch not kept; zero: none
	kept                     bool      // settlements are kept (Poller.deferred)
	keptSince                time.Time // since when the oldest kept ones wait
	completedAt              int64     // when a batch last completed (unix ns); 0: never
	overlapGen               int       // not decided on: closeDeferred clears only its own overlapped

	// The broker's last count (atCount, atKeptCount), and the sequences up
	// to its LastSequence never received (seen.missing).
	answer  asideCount
	missing int64

	// atSettled: the batch, its size, and what the kept batches hold.
	size, keptHeld    int
	retired, leftOpen bool
}

// pollStep is a decision: an act and what it needs, and the values the
// loop sets.
type pollStep struct {
	act     pollAct
	wait    time.Duration // actWait, actCount, actPeek
	n       int           // actPoll: how many to ask for
	holding bool          // actPoll: it may be handed strays it did not ask for
	beside  bool          // actPoll: a batch of the Poller's is open beside it

	dropKnown    bool // nothing is known to be waiting any more
	forget       bool // the gaps counted are no strays (seen.forget)
	strayed      int  // atPeeked: the strays the poll of what was seen may hold
	follow       bool // atPolled: follow the queue (FollowWithin)
	overlapShort bool // atDelivered: a poll beside came back short
	known        int  // atCount: what a poll would get at once
	closing      bool // atCount: a completed batch's close is under way
	quiet        bool // atCount: time to send the kept settlements
	quietClose   bool // atKeptCount: the kept settlements stranded nothing
}

// closeRecounts bounds the counts the watch makes again while a completed
// batch's close is under way (see atStrays).
const closeRecounts = 3

// nextStep decides the Poller's next step from v. It has no effects.
func nextStep(v pollView) pollStep {
	switch v.at {
	case atTurn:
		return v.keptDue()
	case atGate:
		return v.gate()
	case atWatch:
		return v.watch()
	case atStrays:
		return v.recount()
	case atPeeked:
		return v.peeked()
	case atLooked:
		if ok, _ := v.mayPoll(); !ok || v.known <= 0 {
			return pollStep{} // a batch completed meanwhile: the next turn waits
		}
		return pollStep{act: actGoOn}
	case atAsk:
		return v.ask()
	case atPolled:
		return pollStep{follow: v.follows()}
	case atDelivered:
		return v.delivered()
	case atCount:
		return v.count()
	case atAside:
		// A peek that found something meanwhile decides; the count is late.
		if v.known <= 0 {
			return pollStep{act: actGoOn}
		}
		return pollStep{}
	case atKeptSent:
		// The broker closes a batch a moment after its settlement (fact
		// 27): count SettleGrace later, when another batch is open.
		if v.held == 0 {
			return pollStep{}
		}
		return pollStep{act: actCount, wait: v.cfg.SettleGrace}
	case atKeptCount:
		return v.keptClean()
	case atSettled:
		return v.keep()
	}
	return pollStep{}
}

// keptDue: kept settlements go once a count finds nothing waiting (quiet),
// or once the oldest has waited PollWait, the most an open batch delays
// the next poll (see Poller).
func (v *pollView) keptDue() pollStep {
	if v.quiet || v.kept && v.now.Sub(v.keptSince) >= v.cfg.PollWait {
		return pollStep{act: actSendKept}
	}
	return pollStep{}
}

// gate: at MaxInFlight, or where a poll may not go beside the open batches
// (mayPoll), kept settlements go now if there are any, or it waits. Else
// it looks when nothing is known to be waiting, counts again when what is
// known is stale, or polls.
func (v *pollView) gate() pollStep {
	if ok, retry := v.mayPoll(); !ok {
		if v.kept {
			return pollStep{act: actSendKept}
		}
		return pollStep{act: actWait, wait: retry}
	}
	switch {
	case v.known <= 0:
		return v.look()
	case v.stale():
		return pollStep{act: actCount}
	}
	return pollStep{act: actGoOn}
}

// mayPoll reports whether the Poller may poll (or watch) now, with known
// messages waiting: under MaxInFlight, and either with no batch open, or
// for a poll that takes all that is known to be waiting (a light queue;
// traps 5, 13, fact 40) while no open batch may hold messages no poll sees
// (holdingOpen, strayedOpen; fact 45) and no batch completed beside
// another in the last PollWait (see Poller). The wait after such a
// completion is bounded: an open batch may be a long task's, or one whose
// stream was lost. When only that wait stops it, retry is what it has left.
func (v *pollView) mayPoll() (ok bool, retry time.Duration) {
	switch {
	case v.inflight >= v.cfg.MaxInFlight:
		return false, 0
	case v.held == 0:
		return true, 0
	case v.known > v.cfg.MaxItems:
		return false, 0 // a busy queue: one batch at a time
	case v.holdingOpen > 0:
		return false, 0 // what is counted may sit in that batch
	case v.known > 0 && v.known <= v.strayedOpen:
		return false, 0 // all of it may
	case !v.overlapped:
		return true, 0
	}
	if left := v.cfg.PollWait - v.now.Sub(v.overlappedAt); left > 0 {
		return false, left
	}
	return true, 0
}

// look, with nothing known to be waiting: beside a batch of its own open
// less than PeekWait it does not peek (a peek joins the queue group, trap
// 13, fact 22) but waits for a settlement, and counts once OverlapAfter
// has passed since the last look, unless a count aside is under way.
// Batches open for PeekWait are watched past: a lost stream has given
// their messages back already. With none open it watches.
func (v *pollView) look() pollStep {
	if v.held > 0 {
		var age time.Duration // 0 when every open batch is kept
		if !v.runningSince.IsZero() {
			age = v.now.Sub(v.runningSince)
		}
		if age < v.cfg.PeekWait {
			wait := v.cfg.OverlapAfter - v.now.Sub(v.looked)
			if wait > 0 || v.counting {
				return pollStep{act: actWait, wait: max(min(wait, v.cfg.PeekWait-age), 0)}
			}
			return pollStep{act: actCount}
		}
	}
	return pollStep{act: actWatch}
}

// stale: what is known is the rest of a count made before the last batch
// completed, fewer than that batch held, with none open. Its settlement
// may have left as many strays, all forced on the next poll, which keeps
// what it asked for (fact 45): asking for the rest of the old count would
// hold the others for one more batch, and make a small one. Count again.
func (v *pollView) stale() bool {
	return v.counted && v.known > 0 && v.held == 0 && v.known < v.lastDone &&
		v.completedAt > v.countedAt.UnixNano()
}

// watch, after a batch completed (short) with none open: count first
// when that batch may have left strays, unless it was a lone task's on a
// light queue (the last count found nothing, no gaps below the highest
// sequence received), which a peek or a follow serves without the count's
// ~3 ms. The next poll is forced to take every stray and keeps only what
// it asked for (fact 45), so it must ask for what the count finds.
func (v *pollView) watch() pollStep {
	lone := v.lastDone <= 1 && v.found <= 0 && v.gaps <= 0
	if v.short && v.held == 0 && !lone {
		return pollStep{act: actCount}
	}
	return v.followOrPeek()
}

// recount: while a count finds more pending than the Poller holds and can
// poll (closing), the broker may still apply the settlement, and a burst
// arriving then goes to the group's shadow and to the next poll (fact 45).
// Count again SettleGrace later, closeRecounts times at most, unless more
// waits than one poll takes (a busy queue: nothing polls beside). A count
// that finds nothing means the gaps were no strays: they are forgotten.
func (v *pollView) recount() pollStep {
	if v.recounts < closeRecounts && v.closing && v.known <= v.cfg.MaxItems {
		return pollStep{act: actCount, wait: v.cfg.SettleGrace}
	}
	if v.known > 0 {
		return pollStep{act: actGoOn}
	}
	s := v.followOrPeek()
	s.forget = true
	return s
}

// followOrPeek: on a followed queue the next task is polled at once after
// a completion, with none open (a follow must not overlap, trap 5; fact
// 25). Else it peeks, which holds no slot of the broker's poll pool (trap
// 11); the first peek after a completion gives up after SettleGrace, so
// that a task arriving while the batch closes is not held by it (fact 26).
func (v *pollView) followOrPeek() pollStep {
	if v.short && v.following && v.held == 0 {
		return pollStep{act: actFollow}
	}
	if v.short {
		return pollStep{act: actPeek, wait: v.cfg.SettleGrace}
	}
	return pollStep{act: actPeek}
}

// peeked: what a peek saw after a completion, with no poll or count since
// that completion, may come with that batch's strays: the poll of it may
// be handed up to as many as that batch held, and hold them (fact 46).
func (v *pollView) peeked() pollStep {
	if v.known <= 0 {
		return pollStep{}
	}
	s := pollStep{act: actGoOn}
	if v.completedAt > v.polledDone && v.completedAt > v.countedAt.UnixNano() {
		s.strayed = v.lastDone
	}
	return s
}

// ask: what is known to be waiting, less what the open batches may hold
// unseen (strayedOpen, fact 46), capped by MaxItems and MaxInFlight. A
// count of one with none open is peeked first: it may be a message the
// last batch stranded on its way back, and a poll for it would wait its
// whole PollWait in a poll slot (traps 2, 11). With none open a poll
// asking for less than was counted may be handed the rest (fact 45).
func (v *pollView) ask() pollStep {
	open := v.held > 0
	if v.known <= 0 || v.known == 1 && v.counted && !open {
		return pollStep{dropKnown: true}
	}
	n := min(v.known-v.strayedOpen, v.cfg.MaxItems, v.cfg.MaxInFlight-v.inflight)
	if n <= 0 {
		return pollStep{}
	}
	return pollStep{act: actPoll, n: n, beside: open, holding: !open && v.counted && n < v.known}
}

// follows: the queue is followed after a lone task that a peek or a follow
// saw (not a count: a busy queue), delivered within FollowWithin of the
// last completion, with no other batch open (trap 5; fact 25). A poll
// that came back short (the queue went quiet) ends it.
func (v *pollView) follows() bool {
	return v.cfg.FollowWithin > 0 && v.asked == 1 && v.got == 1 && !v.counted &&
		v.completedAt > 0 && v.now.Sub(time.Unix(0, v.completedAt)) <= v.cfg.FollowWithin &&
		v.held == v.got
}

// delivered: a poll that came back short waited, and the estimate was
// off: nothing is known, its gaps are no strays, and beside an open batch
// it stops polls beside (what it was counted for sits there, fact 45).
// After the last of a count it counts again (a busy queue skips the peek);
// after what a peek saw it counts aside (a burst's first, or a lone
// task?), not while one is under way, nor within OverlapAfter of a count
// that found nothing: on a light queue that count buys nothing (trap 14).
func (v *pollView) delivered() pollStep {
	switch {
	case v.got < v.asked:
		return pollStep{dropKnown: true, forget: true, overlapShort: v.beside}
	case v.known > 0:
		return pollStep{}
	case v.counted:
		return pollStep{act: actCount}
	case v.counting || v.found == 0 && v.now.Sub(v.countedAt) < v.cfg.OverlapAfter:
		return pollStep{}
	}
	return pollStep{act: actCountAside}
}

// count reads a count: what a poll would get at once (ready); closing
// when more is pending than the Poller holds and can poll (a completed
// batch's settlement not applied yet, or strays, fact 39); quiet when it
// found nothing waiting after the oldest kept settlements were kept.
func (v *pollView) count() pollStep {
	a := v.answer
	s := pollStep{known: v.ready()}
	s.closing = a.err == nil && a.ok && a.q.Waiting-int64(v.held) > int64(s.known)
	s.quiet = v.kept && s.known == 0 && a.err == nil && v.keptSince.Before(a.at)
	return s
}

// ready estimates from a count how many messages a poll would get at
// once; 0 when unknown. Waiting counts our unsettled messages too, so what
// the open batches hold is subtracted; it drops only once the broker has
// applied our settlements, so the estimate is also capped by the sequences
// never received: with none open, every one up to LastSequence (the strays
// a closed batch left are forced on the next poll, fact 45); with one open
// only those after the highest received (strays may sit in it). An
// undercount costs a smaller poll, an overcount a whole WaitTimeout (trap 2).
func (v *pollView) ready() int {
	a := v.answer
	if a.err != nil || !a.ok {
		return 0
	}
	n := a.q.Waiting - int64(v.held)
	if last := a.q.LastSequence; v.seenMax > 0 && last > 0 {
		if v.held > 0 {
			n = min(n, last-int64(v.seenMax))
		} else {
			n = min(n, v.missing)
		}
	}
	return int(max(n, 0))
}

// keptClean: the kept settlements stranded nothing when the check's count
// finds nothing waiting beyond what the Poller holds and no close under
// way, or every sequence stored was received; then polls beside go on.
func (v *pollView) keptClean() pollStep {
	a := v.answer
	return pollStep{quietClose: a.err == nil && a.ok &&
		(v.known == 0 && !v.closing || a.q.LastSequence > 0 && v.missing == 0)}
}

// keep: a batch's settlements wait while another batch of the Poller's
// runs (open and not kept): its close would move what its settlement
// strands into the open ones, unseen (trap 13, fact 40), just when the
// producers of its results send their next tasks. They wait for a quiet
// moment (fact 47). Not on a retired client, nor one with a batch left
// open (its close gives everything back). Else they go, with the kept ones.
func (v *pollView) keep() pollStep {
	if running := v.held - v.size - v.keptHeld; running > 0 && !v.retired && !v.leftOpen {
		return pollStep{act: actKeep}
	}
	return pollStep{act: actSendKept}
}
