package consumer

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// crashTable is the fleet's crash counts as the crash reports tell them:
// per message (journal token), the largest count each journal reported.
// Counts of one journal are cumulative (Journal.Recovered), so keeping the
// largest makes a duplicate delivery, a replay of the channel or a report
// published again by the next process on that journal count once; counts
// of different journals add up.
//
// It is bounded: a message's entry expires window after its last report
// (the broker keeps the channel's events about that long, so a new
// replica reading the channel from its start sees the same), at most
// maxJournals journals count per message, and past maxEntries messages the
// ones reported least recently go first.
//
// Safe for concurrent use.
type crashTable struct {
	mu          sync.Mutex
	window      time.Duration
	maxEntries  int
	maxJournals int
	byToken     map[string]*crashEntry
	// journals are the journals heard from (any report, counts or
	// none) and when last, at most maxPeers.
	journals map[string]time.Time
}

type crashEntry struct {
	counts map[string]int // journal id -> largest count reported
	last   time.Time      // time of the last report that counted
}

const (
	defaultCrashWindow      = time.Hour
	defaultCrashTableMax    = 10_000
	defaultCrashJournalsMax = 64
	maxPeers                = 1024
)

func newCrashTable(window time.Duration, maxEntries int) *crashTable {
	if window <= 0 {
		window = defaultCrashWindow
	}
	if maxEntries <= 0 {
		maxEntries = defaultCrashTableMax
	}
	return &crashTable{window: window, maxEntries: maxEntries, maxJournals: defaultCrashJournalsMax, byToken: map[string]*crashEntry{},
		journals: map[string]time.Time{}}
}

// add applies a report published at time at (its event's timestamp) and
// reports how many counts grew. A report older than the window is
// ignored.
func (t *crashTable) add(r CrashReport, at, now time.Time) int {
	if now.Sub(at) > t.window {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sawLocked(r.Journal, at, now)
	grew := 0
	for _, c := range r.Crashes {
		e := t.byToken[c.Token]
		if e == nil {
			e = &crashEntry{counts: map[string]int{}}
			t.byToken[c.Token] = e
		}
		old, had := e.counts[r.Journal]
		if !had && len(e.counts) >= t.maxJournals {
			continue
		}
		if c.N > old {
			e.counts[r.Journal] = c.N
			grew++
		}
		if at.After(e.last) {
			e.last = at
		}
	}
	t.trimLocked(now)
	return grew
}

// sawLocked records that journal reported at time at.
func (t *crashTable) sawLocked(journal string, at, now time.Time) {
	if _, ok := t.journals[journal]; !ok && len(t.journals) >= maxPeers {
		for j, last := range t.journals {
			if now.Sub(last) > t.window {
				delete(t.journals, j)
			}
		}
		if len(t.journals) >= maxPeers {
			return
		}
	}
	if at.After(t.journals[journal]) {
		t.journals[journal] = at
	}
}

// peers reports whether a journal other than self reported within the
// window: whether this process has company on the queue.
func (t *crashTable) peers(self string, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for j, last := range t.journals {
		if j != self && now.Sub(last) <= t.window {
			return true
		}
	}
	return false
}

// crashes is a message's count for the journal self: the other journals'
// counts plus the larger of self's reported count and local, what self's
// journal holds now (its own report may not have reached the broker).
// Without a report it is local.
func (t *crashTable) crashes(token, self string, local int, now time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.byToken[token]
	if e == nil || now.Sub(e.last) > t.window {
		return local
	}
	n := 0
	for j, c := range e.counts {
		if j == self {
			local = max(local, c)
		} else {
			n += c
		}
	}
	return n + local
}

// expire drops the entries whose last report is older than the window.
func (t *crashTable) expire(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked(now)
}

func (t *crashTable) expireLocked(now time.Time) {
	for tok, e := range t.byToken {
		if now.Sub(e.last) > t.window {
			delete(t.byToken, tok)
		}
	}
	for j, last := range t.journals {
		if now.Sub(last) > t.window {
			delete(t.journals, j)
		}
	}
}

// trimLocked keeps at most maxEntries entries: the expired go first, then
// the least recently reported (a tenth more than needed, so that a full
// table trims once per many reports, not at each).
func (t *crashTable) trimLocked(now time.Time) {
	if len(t.byToken) <= t.maxEntries {
		return
	}
	t.expireLocked(now)
	over := len(t.byToken) - t.maxEntries
	if over <= 0 {
		return
	}
	over = min(len(t.byToken), over+t.maxEntries/10)
	toks := make([]string, 0, len(t.byToken))
	for tok := range t.byToken {
		toks = append(toks, tok)
	}
	slices.SortFunc(toks, func(a, b string) int { // least recent first
		return cmp.Or(t.byToken[a].last.Compare(t.byToken[b].last), cmp.Compare(a, b))
	})
	for _, tok := range toks[:over] {
		delete(t.byToken, tok)
	}
}

// len is the number of messages with counts.
func (t *crashTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byToken)
}
