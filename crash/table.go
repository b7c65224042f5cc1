package crash

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// table is the fleet's crash counts as the crash reports tell them:
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
type table struct {
	mu          sync.Mutex
	window      time.Duration
	maxEntries  int
	maxJournals int
	byToken     map[string]*entry
	// journals are the journals heard from (any report, counts or
	// none) and when last, at most maxPeers.
	journals map[string]time.Time
}

type entry struct {
	counts map[string]int // journal id -> largest count reported
	last   time.Time      // time of the last report that counted
}

const (
	defaultWindow      = time.Hour
	defaultTableMax    = 10_000
	defaultJournalsMax = 64
	maxPeers           = 1024
)

func newTable(window time.Duration, maxEntries int) *table {
	if window <= 0 {
		window = defaultWindow
	}
	if maxEntries <= 0 {
		maxEntries = defaultTableMax
	}
	return &table{window: window, maxEntries: maxEntries, maxJournals: defaultJournalsMax, byToken: map[string]*entry{},
		journals: map[string]time.Time{}}
}

// add applies a report published at time at (its event's timestamp) and
// reports how many counts grew. A report older than the window is
// ignored.
func (t *table) add(r Report, at, now time.Time) int {
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
			e = &entry{counts: map[string]int{}}
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
func (t *table) sawLocked(journal string, at, now time.Time) {
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
func (t *table) peers(self string, now time.Time) bool {
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
func (t *table) crashes(token, self string, local int, now time.Time) int {
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
func (t *table) expire(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked(now)
}

func (t *table) expireLocked(now time.Time) {
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
func (t *table) trimLocked(now time.Time) {
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
func (t *table) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byToken)
}
