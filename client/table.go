package client

import (
	"sync"
	"time"

	"github.com/inferq/inferq/task"
)

// entry is one task the table knows of: enqueued by this Client, waited
// for, or whose record arrived.
type entry struct {
	id       string
	rec      *task.Record  // the first terminal record; set once
	arrived  chan struct{} // closed when rec is set
	waiters  int           // Waits blocked on arrived
	expected bool          // enqueued by this Client and not forgotten
	seq      uint64        // the record's events store sequence
	at       time.Time     // when the record arrived
	gone     bool          // handed out, forgotten or evicted: skip in the queues
	stray    bool          // queued in table.stray (counted in strays)
}

// table demultiplexes result records to waiters by task_id. All its
// fields are guarded by mu; it never blocks while holding it. Records
// arrive in sequence order from the one subscription, so the two queues
// of unclaimed records are in sequence order too, which makes the
// low-water mark the front of either.
type table struct {
	mu      sync.Mutex
	entries map[string]*entry

	// done remembers the last doneCap task ids handed out or forgotten,
	// in a ring, to drop their duplicate records.
	done     map[string]struct{}
	doneRing []string
	doneNext int

	held   []*entry // arrived, not handed out, expected (kept until waited for)
	stray  []*entry // arrived, not handed out, not expected (bounded, TTL)
	strays int      // live entries in stray

	last     uint64 // highest sequence seen
	maxStray int
	ttl      time.Duration

	dups, evicted int64
}

func newTable(maxStray, doneCap int, ttl time.Duration) *table {
	return &table{
		entries:  map[string]*entry{},
		done:     make(map[string]struct{}, min(doneCap, 1<<12)),
		doneRing: make([]string, doneCap),
		maxStray: maxStray,
		ttl:      ttl,
	}
}

// get returns id's entry, making one. mu is held.
func (t *table) get(id string) *entry {
	e := t.entries[id]
	if e == nil {
		e = &entry{id: id, arrived: make(chan struct{})}
		t.entries[id] = e
	}
	return e
}

// finish marks e handed out (or forgotten): it leaves the table and its id
// joins the done ring. mu is held.
func (t *table) finish(e *entry) {
	if e.gone {
		return
	}
	e.gone = true
	if t.entries[e.id] == e {
		delete(t.entries, e.id)
	}
	if e.stray {
		t.strays--
	}
	t.markDone(e.id)
}

func (t *table) markDone(id string) {
	if _, ok := t.done[id]; ok {
		return
	}
	if old := t.doneRing[t.doneNext]; old != "" {
		delete(t.done, old)
	}
	t.doneRing[t.doneNext] = id
	t.doneNext = (t.doneNext + 1) % len(t.doneRing)
	t.done[id] = struct{}{}
}

// expect registers tasks enqueued by this Client, before they are sent,
// so that their records are kept however early they come.
func (t *table) expect(ids ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		if e := t.get(id); e.rec == nil {
			e.expected = true
		}
	}
}

// unexpect undoes expect for tasks whose send failed.
func (t *table) unexpect(ids ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		e := t.entries[id]
		if e == nil || !e.expected {
			continue
		}
		e.expected = false
		if e.rec == nil && e.waiters == 0 {
			delete(t.entries, id)
		}
	}
}

// forget drops what the table holds for ids and drops their records when
// they come.
func (t *table) forget(ids ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		if e := t.entries[id]; e != nil && e.waiters == 0 {
			t.finish(e)
		} else if e == nil {
			t.markDone(id)
		}
	}
}

// put files a terminal record that arrived with sequence seq. It reports
// false for a duplicate (dropped).
func (t *table) put(id string, rec *task.Record, seq uint64, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.last = max(t.last, seq)
	if _, ok := t.done[id]; ok {
		t.dups++
		return false
	}
	e := t.get(id)
	if e.rec != nil {
		t.dups++
		return false
	}
	e.rec, e.seq, e.at = rec, seq, now
	close(e.arrived)
	switch {
	case e.waiters > 0:
		t.finish(e) // the blocked Waits read e.rec after arrived
	case e.expected:
		t.held = append(t.held, e)
	default:
		t.stray = append(t.stray, e)
		e.stray = true
		t.strays++
		t.trim(now)
	}
	return true
}

// dropDone drops a record of a task handed out or forgotten, counting it
// as a duplicate, and reports whether it did.
func (t *table) dropDone(id string, seq uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.done[id]; !ok {
		return false
	}
	t.last = max(t.last, seq)
	t.dups++
	return true
}

// seen records a sequence that carried no record (a probe, a malformed
// body), so the low-water mark can pass it.
func (t *table) seen(seq uint64) {
	t.mu.Lock()
	t.last = max(t.last, seq)
	t.mu.Unlock()
}

// trim evicts strays over the bound or older than the TTL (when now is
// not zero). mu is held.
func (t *table) trim(now time.Time) {
	for len(t.stray) > 0 {
		e := t.stray[0]
		if !e.gone && t.strays <= t.maxStray && (now.IsZero() || now.Sub(e.at) < t.ttl) {
			break
		}
		t.stray[0] = nil
		t.stray = t.stray[1:]
		if !e.gone {
			delete(t.entries, e.id)
			e.gone = true
			t.strays--
			t.evicted++
		}
	}
}

// expire evicts strays older than the TTL.
func (t *table) expire(now time.Time) {
	t.mu.Lock()
	t.trim(now)
	t.mu.Unlock()
}

// lowWater returns the sequence at and below which every record has been
// handed out, forgotten or evicted: where a restarted Client resumes.
func (t *table) lowWater() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.held) > 0 && t.held[0].gone {
		t.held[0] = nil
		t.held = t.held[1:]
	}
	t.trim(time.Time{})
	low := t.last
	for _, q := range [][]*entry{t.held, t.stray} {
		if len(q) > 0 && q[0].seq > 0 {
			low = min(low, q[0].seq-1)
		}
	}
	return low
}

// take hands out id's record if it is there, without waiting. It returns
// errReturned when the record was handed out already or forgotten.
func (t *table) take(id string) (*task.Record, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.entries[id]; e != nil && e.rec != nil {
		t.finish(e)
		return e.rec, nil
	}
	if _, ok := t.done[id]; ok {
		return nil, ErrReturned
	}
	return nil, nil
}

// register returns id's record when it is there, or the entry to wait on
// with one more waiter.
func (t *table) register(id string) (*entry, *task.Record, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.entries[id]; e != nil && e.rec != nil {
		t.finish(e)
		return nil, e.rec, nil
	}
	if _, ok := t.done[id]; ok {
		return nil, nil, ErrReturned
	}
	e := t.get(id)
	e.waiters++
	return e, nil, nil
}

// unregister drops a waiter that stopped waiting. It returns the record
// if it arrived meanwhile.
func (t *table) unregister(e *entry) *task.Record {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e.rec != nil {
		return e.rec
	}
	e.waiters--
	if e.waiters == 0 && !e.expected && t.entries[e.id] == e {
		delete(t.entries, e.id)
	}
	return nil
}

// state says what the table knows of id without handing anything out.
func (t *table) state(id string) (rec *task.Record, expected, done bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.entries[id]; e != nil {
		return e.rec, e.expected, false
	}
	_, done = t.done[id]
	return nil, false, done
}

// Stats are a Client's counters.
type Stats struct {
	// Pending counts tasks enqueued and not yet handed out or forgotten.
	Pending int
	// Unclaimed counts records received and not yet waited for.
	Unclaimed int
	// Duplicates counts records dropped as duplicates; Evicted those
	// dropped over MaxUnclaimed or UnclaimedTTL.
	Duplicates, Evicted int64
	// LastSeq is the highest reply channel sequence seen.
	LastSeq uint64
}

func (t *table) stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := Stats{Duplicates: t.dups, Evicted: t.evicted, LastSeq: t.last}
	for _, e := range t.entries {
		if e.expected {
			s.Pending++
		}
		if e.rec != nil {
			s.Unclaimed++
		}
	}
	return s
}
