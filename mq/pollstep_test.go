package mq

import (
	"context"
	"errors"
	"testing"
	"time"
)

// nextStep, without a broker: what the Poller does next, one row per rule.
// The defaults apply: MaxItems 32, MaxInFlight 128, PeekWait and PollWait
// 1 s, OverlapAfter 50 ms, SettleGrace 3 ms, FollowWithin 10 ms.
func TestPollStep(t *testing.T) {
	now := time.Unix(1000, 0)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	done := func(d time.Duration) int64 { return ago(d).UnixNano() } // a completion d ago
	grace := 3 * time.Millisecond
	counted := func(waiting, last int64) asideCount {
		return asideCount{q: QueueInfo{Waiting: waiting, LastSequence: last}, ok: true, at: ago(time.Millisecond)}
	}
	failed := asideCount{err: errors.New("away"), at: ago(time.Millisecond)}
	for _, tc := range []struct {
		name string
		cfg  func(*PollerConfig)
		v    pollView
		want pollStep
	}{
		// atTurn: are kept settlements due?
		{"turn: nothing kept, nothing to send", nil, pollView{at: atTurn}, pollStep{}},
		{"turn: a count found the queue quiet: kept settlements go", nil, pollView{at: atTurn, quiet: true, kept: true, keptSince: ago(time.Millisecond)}, pollStep{act: actSendKept}},
		{"turn: kept for PollWait: they go", nil, pollView{at: atTurn, kept: true, keptSince: ago(time.Second)}, pollStep{act: actSendKept}},
		{"turn: kept for less than PollWait: they wait", nil, pollView{at: atTurn, kept: true, keptSince: ago(500 * time.Millisecond)}, pollStep{}},

		// atGate: may it poll?
		{"gate: at MaxInFlight: wait for a settlement", nil, pollView{at: atGate, known: 3, inflight: 128, held: 128}, pollStep{act: actWait}},
		{"gate: refused with settlements kept: send them instead", nil, pollView{at: atGate, known: 3, inflight: 128, held: 128, kept: true, keptSince: ago(time.Millisecond)}, pollStep{act: actSendKept}},
		{"gate: a busy queue beside an open batch: one batch at a time", nil, pollView{at: atGate, known: 33, inflight: 4, held: 4}, pollStep{act: actWait}},
		{"gate: an open batch may hold what was counted: no poll beside", nil, pollView{at: atGate, known: 2, inflight: 4, held: 4, holdingOpen: 1}, pollStep{act: actWait}},
		{"gate: all that is known may be strays in an open batch: no poll beside", nil, pollView{at: atGate, known: 3, inflight: 1, held: 1, strayedOpen: 3}, pollStep{act: actWait}},
		{"gate: a light queue beside an open batch: poll", nil, pollView{at: atGate, known: 2, inflight: 4, held: 4, strayedOpen: 1}, pollStep{act: actGoOn}},
		{"gate: a completion beside an open batch: wait out PollWait", nil, pollView{at: atGate, known: 2, inflight: 4, held: 4, overlapped: true, overlappedAt: ago(300 * time.Millisecond)}, pollStep{act: actWait, wait: 700 * time.Millisecond}},
		{"gate: PollWait after a completion beside: poll", nil, pollView{at: atGate, known: 2, inflight: 4, held: 4, overlapped: true, overlappedAt: ago(time.Second)}, pollStep{act: actGoOn}},
		{"gate: known and none open: poll", nil, pollView{at: atGate, known: 5}, pollStep{act: actGoOn}},
		{"gate: the rest of a count older than a bigger batch's completion: count again", nil, pollView{at: atGate, known: 3, counted: true, lastDone: 8, countedAt: ago(10 * time.Millisecond), completedAt: done(5 * time.Millisecond)}, pollStep{act: actCount}},
		{"gate: the rest of a count, no completion since: poll", nil, pollView{at: atGate, known: 3, counted: true, lastDone: 8, countedAt: ago(10 * time.Millisecond), completedAt: done(20 * time.Millisecond)}, pollStep{act: actGoOn}},
		{"gate: the rest of a count, no fewer than the batch held: poll", nil, pollView{at: atGate, known: 8, counted: true, lastDone: 8, countedAt: ago(10 * time.Millisecond), completedAt: done(5 * time.Millisecond)}, pollStep{act: actGoOn}},

		// atGate with nothing known: how it looks.
		{"look: none open: watch", nil, pollView{at: atGate}, pollStep{act: actWatch}},
		{"look: beside a running batch, within OverlapAfter of the last look: wait the rest", nil, pollView{at: atGate, inflight: 2, held: 2, runningSince: ago(100 * time.Millisecond), looked: ago(20 * time.Millisecond)}, pollStep{act: actWait, wait: 30 * time.Millisecond}},
		{"look: the wait ends when the batch has been open PeekWait", nil, pollView{at: atGate, inflight: 2, held: 2, runningSince: ago(990 * time.Millisecond), looked: ago(20 * time.Millisecond)}, pollStep{act: actWait, wait: 10 * time.Millisecond}},
		{"look: beside a running batch, OverlapAfter since the last look: count", nil, pollView{at: atGate, inflight: 2, held: 2, runningSince: ago(100 * time.Millisecond), looked: ago(60 * time.Millisecond)}, pollStep{act: actCount}},
		{"look: a count aside under way: wait for it or a settlement", nil, pollView{at: atGate, counting: true, inflight: 2, held: 2, runningSince: ago(100 * time.Millisecond), looked: ago(60 * time.Millisecond)}, pollStep{act: actWait}},
		{"look: every open batch kept: counts as just polled", nil, pollView{at: atGate, held: 2, kept: true, keptSince: ago(time.Millisecond), looked: ago(20 * time.Millisecond)}, pollStep{act: actWait, wait: 30 * time.Millisecond}},
		{"look: a batch open PeekWait: watch past it", nil, pollView{at: atGate, inflight: 2, held: 2, runningSince: ago(time.Second), looked: ago(20 * time.Millisecond)}, pollStep{act: actWatch}},

		// atWatch: count, follow or peek.
		{"watch: no completion since the last watch: peek for PeekWait", nil, pollView{at: atWatch, lastDone: 4}, pollStep{act: actPeek}},
		{"watch: after a lone task's batch on a light queue: peek for SettleGrace", nil, pollView{at: atWatch, short: true, lastDone: 1}, pollStep{act: actPeek, wait: grace}},
		{"watch: after a batch of several: count its strays", nil, pollView{at: atWatch, short: true, lastDone: 4}, pollStep{act: actCount}},
		{"watch: after a lone task, gaps below the highest received: count", nil, pollView{at: atWatch, short: true, lastDone: 1, gaps: 2}, pollStep{act: actCount}},
		{"watch: after a lone task, the last count found some: count", nil, pollView{at: atWatch, short: true, lastDone: 1, found: 3}, pollStep{act: actCount}},
		{"watch: a batch still open: no strays to count, peek", nil, pollView{at: atWatch, short: true, lastDone: 4, inflight: 2, held: 2}, pollStep{act: actPeek, wait: grace}},
		{"watch: a followed queue after a completion: follow", nil, pollView{at: atWatch, short: true, following: true, lastDone: 1}, pollStep{act: actFollow}},
		{"watch: followed, but a batch is open: peek", nil, pollView{at: atWatch, short: true, following: true, lastDone: 1, inflight: 1, held: 1}, pollStep{act: actPeek, wait: grace}},
		{"watch: followed, no completion since: peek", nil, pollView{at: atWatch, following: true, lastDone: 1}, pollStep{act: actPeek}},

		// atStrays: the count after a completion came back.
		{"strays: a close under way: count again after SettleGrace", nil, pollView{at: atStrays, short: true, closing: true, known: 2}, pollStep{act: actCount, wait: grace}},
		{"strays: counted again closeRecounts times: poll", nil, pollView{at: atStrays, short: true, closing: true, known: 2, recounts: closeRecounts}, pollStep{act: actGoOn}},
		{"strays: a close under way on a busy queue: poll", nil, pollView{at: atStrays, short: true, closing: true, known: 40}, pollStep{act: actGoOn}},
		{"strays: found some: poll", nil, pollView{at: atStrays, short: true, known: 3}, pollStep{act: actGoOn}},
		{"strays: found none: forget the gaps, peek", nil, pollView{at: atStrays, short: true}, pollStep{act: actPeek, wait: grace, forget: true}},
		{"strays: found none on a followed queue: forget the gaps, follow", nil, pollView{at: atStrays, short: true, following: true}, pollStep{act: actFollow, forget: true}},

		// atPeeked.
		{"peeked: nothing seen", nil, pollView{at: atPeeked}, pollStep{}},
		{"peeked: a task after a completion no poll nor count knew of: it may come with its strays", nil, pollView{at: atPeeked, known: 1, lastDone: 6, completedAt: done(time.Millisecond), polledDone: done(5 * time.Millisecond), countedAt: ago(10 * time.Millisecond)}, pollStep{act: actGoOn, strayed: 6}},
		{"peeked: the last poll knew of the completion: no strays", nil, pollView{at: atPeeked, known: 1, lastDone: 6, completedAt: done(time.Millisecond), polledDone: done(time.Millisecond), countedAt: ago(10 * time.Millisecond)}, pollStep{act: actGoOn}},
		{"peeked: a count after the completion: no strays", nil, pollView{at: atPeeked, known: 1, lastDone: 6, completedAt: done(time.Millisecond), polledDone: done(5 * time.Millisecond), countedAt: ago(time.Microsecond)}, pollStep{act: actGoOn}},

		// atLooked: may it still poll what the look found?
		{"looked: found nothing", nil, pollView{at: atLooked}, pollStep{}},
		{"looked: a completion beside meanwhile: the next turn waits", nil, pollView{at: atLooked, known: 2, inflight: 2, held: 2, overlapped: true, overlappedAt: ago(time.Millisecond)}, pollStep{}},
		{"looked: may poll", nil, pollView{at: atLooked, known: 2}, pollStep{act: actGoOn}},

		// atAsk: how many.
		{"ask: nothing known", nil, pollView{at: atAsk}, pollStep{dropKnown: true}},
		{"ask: a count of one, none open: peek it first", nil, pollView{at: atAsk, known: 1, counted: true}, pollStep{dropKnown: true}},
		{"ask: a count of one beside an open batch: poll it", nil, pollView{at: atAsk, known: 1, counted: true, inflight: 2, held: 2}, pollStep{act: actPoll, n: 1, beside: true}},
		{"ask: what a peek saw: poll it", nil, pollView{at: atAsk, known: 1}, pollStep{act: actPoll, n: 1}},
		{"ask: all of a count: holds nothing", nil, pollView{at: atAsk, known: 5, counted: true}, pollStep{act: actPoll, n: 5}},
		{"ask: capped by MaxItems, none open: may be handed the rest", nil, pollView{at: atAsk, known: 40, counted: true}, pollStep{act: actPoll, n: 32, holding: true}},
		{"ask: capped by MaxInFlight", nil, pollView{at: atAsk, known: 10, counted: true, inflight: 124, held: 124}, pollStep{act: actPoll, n: 4, beside: true}},
		{"ask: less what open batches may hold unseen", nil, pollView{at: atAsk, known: 5, counted: true, inflight: 1, held: 1, strayedOpen: 2}, pollStep{act: actPoll, n: 3, beside: true}},
		{"ask: no room: nothing, known kept", nil, pollView{at: atAsk, known: 3, inflight: 128, held: 128}, pollStep{}},

		// atPolled: follow the queue?
		{"polled: a lone task a peek saw, within FollowWithin of a completion: follow", nil, pollView{at: atPolled, asked: 1, got: 1, inflight: 1, held: 1, completedAt: done(5 * time.Millisecond)}, pollStep{follow: true}},
		{"polled: a count's: no follow", nil, pollView{at: atPolled, counted: true, asked: 1, got: 1, inflight: 1, held: 1, completedAt: done(5 * time.Millisecond)}, pollStep{}},
		{"polled: a poll of several: no follow", nil, pollView{at: atPolled, asked: 2, got: 2, inflight: 2, held: 2, completedAt: done(5 * time.Millisecond)}, pollStep{}},
		{"polled: later than FollowWithin: no follow", nil, pollView{at: atPolled, asked: 1, got: 1, inflight: 1, held: 1, completedAt: done(20 * time.Millisecond)}, pollStep{}},
		{"polled: another batch open: no follow", nil, pollView{at: atPolled, asked: 1, got: 1, inflight: 2, held: 2, completedAt: done(5 * time.Millisecond)}, pollStep{}},
		{"polled: empty (the queue went quiet): the follow ends", nil, pollView{at: atPolled, asked: 1, completedAt: done(5 * time.Millisecond)}, pollStep{}},
		{"polled: no completion yet: no follow", nil, pollView{at: atPolled, asked: 1, got: 1, inflight: 1, held: 1}, pollStep{}},
		{"polled: FollowWithin off: no follow", func(c *PollerConfig) { c.FollowWithin = -1 }, pollView{at: atPolled, asked: 1, got: 1, inflight: 1, held: 1, completedAt: done(5 * time.Millisecond)}, pollStep{}},

		// atDelivered: count again?
		{"delivered: short: nothing known, the gaps are no strays", nil, pollView{at: atDelivered, counted: true, asked: 3, got: 1}, pollStep{dropKnown: true, forget: true}},
		{"delivered: short beside an open batch: no polls beside", nil, pollView{at: atDelivered, counted: true, asked: 3, got: 1, beside: true}, pollStep{dropKnown: true, forget: true, overlapShort: true}},
		{"delivered: more known: poll again", nil, pollView{at: atDelivered, counted: true, known: 8, asked: 32, got: 32}, pollStep{}},
		{"delivered: the last of a count: count again", nil, pollView{at: atDelivered, counted: true, asked: 3, got: 3}, pollStep{act: actCount}},
		{"delivered: what a peek saw: count aside", nil, pollView{at: atDelivered, asked: 1, got: 1, found: 2}, pollStep{act: actCountAside}},
		{"delivered: a count aside under way: none more", nil, pollView{at: atDelivered, asked: 1, got: 1, counting: true, found: 2}, pollStep{}},
		{"delivered: a count found nothing within OverlapAfter: none", nil, pollView{at: atDelivered, asked: 1, got: 1, countedAt: ago(10 * time.Millisecond)}, pollStep{}},
		{"delivered: OverlapAfter after a count that found nothing: count aside", nil, pollView{at: atDelivered, asked: 1, got: 1, countedAt: ago(60 * time.Millisecond)}, pollStep{act: actCountAside}},

		// atCount: what a count says.
		{"count: failed: nothing known", nil, pollView{at: atCount, answer: failed}, pollStep{}},
		{"count: no such queue: nothing known", nil, pollView{at: atCount, answer: asideCount{at: ago(time.Millisecond)}}, pollStep{}},
		{"count: nothing received yet: Waiting", nil, pollView{at: atCount, answer: counted(5, 5)}, pollStep{known: 5}},
		{"count: none open: capped by the sequences never received, close under way", nil, pollView{at: atCount, seenMax: 10, missing: 3, answer: counted(8, 15)}, pollStep{known: 3, closing: true}},
		{"count: none open, all of it never received", nil, pollView{at: atCount, seenMax: 10, missing: 5, answer: counted(5, 15)}, pollStep{known: 5}},
		{"count: beside an open batch: Waiting less what it holds, capped after the highest received", nil, pollView{at: atCount, inflight: 2, held: 2, seenMax: 10, missing: 5, answer: counted(7, 13)}, pollStep{known: 3, closing: true}},
		{"count: no LastSequence: Waiting less what we hold", nil, pollView{at: atCount, inflight: 1, held: 1, seenMax: 10, answer: counted(4, 0)}, pollStep{known: 3}},
		{"count: we hold more than waits: none", nil, pollView{at: atCount, inflight: 3, held: 3, answer: counted(1, 0)}, pollStep{}},
		{"count: nothing waiting after the settlements were kept: quiet", nil, pollView{at: atCount, kept: true, keptSince: ago(5 * time.Millisecond), answer: counted(0, 0)}, pollStep{quiet: true}},
		{"count: asked before the settlements were kept: not quiet", nil, pollView{at: atCount, kept: true, keptSince: ago(time.Microsecond), answer: counted(0, 0)}, pollStep{}},
		{"count: failed: not quiet", nil, pollView{at: atCount, kept: true, keptSince: ago(5 * time.Millisecond), answer: failed}, pollStep{}},
		{"count: something waits: not quiet", nil, pollView{at: atCount, kept: true, keptSince: ago(5 * time.Millisecond), answer: counted(2, 0)}, pollStep{known: 2}},

		// atAside.
		{"aside: nothing known: take it", nil, pollView{at: atAside}, pollStep{act: actGoOn}},
		{"aside: a peek found something meanwhile: drop it", nil, pollView{at: atAside, known: 1}, pollStep{}},

		// atKeptSent, atKeptCount: check a close of kept settlements.
		{"kept sent, none open: no check", nil, pollView{at: atKeptSent}, pollStep{}},
		{"kept sent beside an open batch: count SettleGrace later", nil, pollView{at: atKeptSent, inflight: 2, held: 2}, pollStep{act: actCount, wait: grace}},
		{"kept count: nothing waits, no close under way: quiet", nil, pollView{at: atKeptCount, answer: counted(2, 0)}, pollStep{quietClose: true}},
		{"kept count: something waits: loud", nil, pollView{at: atKeptCount, known: 2, answer: counted(4, 0)}, pollStep{}},
		{"kept count: a close under way: loud", nil, pollView{at: atKeptCount, closing: true, answer: counted(4, 0)}, pollStep{}},
		{"kept count: every sequence stored was received: quiet", nil, pollView{at: atKeptCount, known: 2, closing: true, answer: counted(4, 10)}, pollStep{quietClose: true}},
		{"kept count: a sequence never received: loud", nil, pollView{at: atKeptCount, known: 2, missing: 1, answer: counted(4, 10)}, pollStep{}},
		{"kept count: failed: loud", nil, pollView{at: atKeptCount, answer: failed}, pollStep{}},
		{"kept count: no such queue: loud", nil, pollView{at: atKeptCount, answer: asideCount{at: ago(time.Millisecond)}}, pollStep{}},

		// atSettled: keep a batch's settlements?
		{"settled: another batch runs: keep them", nil, pollView{at: atSettled, held: 6, size: 2}, pollStep{act: actKeep}},
		{"settled: only kept batches beside: send them all", nil, pollView{at: atSettled, held: 6, size: 2, keptHeld: 4}, pollStep{act: actSendKept}},
		{"settled: on a retired client: send", nil, pollView{at: atSettled, held: 6, size: 2, retired: true}, pollStep{act: actSendKept}},
		{"settled: its client has a batch left open: send", nil, pollView{at: atSettled, held: 6, size: 2, leftOpen: true}, pollStep{act: actSendKept}},

		{"an unknown phase: nothing", nil, pollView{at: pollPhase(255)}, pollStep{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := PollerConfig{Channel: "c", Deliver: func(context.Context, []*Message) error { return nil }}
			if err := cfg.validate(); err != nil {
				t.Fatal(err)
			}
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			v := tc.v
			v.cfg, v.now = &cfg, now
			if got := nextStep(v); got != tc.want {
				t.Errorf("nextStep = %+v\n                  want %+v", got, tc.want)
			}
		})
	}
}
