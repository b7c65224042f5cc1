package results

import (
	"container/list"
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferq/inferq/lograte"
)

// The spool holds three kinds of record:
//
//   - pending: the broker does not have it yet; Run replays it;
//   - undeliverable: the broker refused it for good; never sent again, kept
//     for lookups;
//   - held: an oversize record whose substitute the broker holds, kept whole
//     for lookups.
//
// Pending and undeliverable records exist nowhere else, so the spool never
// drops one to make room: with a data dir each is on disk and only its
// in-memory copy may go; a record the disk cannot take (no data dir, a
// write error, the disk bound reached) stays in memory ("pinned") until the
// disk or the broker takes it. The bounds (SpoolEntries and
// SpoolMemoryBytes for pinned records, SpoolDiskBytes for the disk) make
// the spool full instead: Full reports it and the consumer takes no new
// tasks until there is room again, so what is still in flight is spooled
// beyond the bound, never dropped. Held records are a lookup cache: their
// bytes give up their room, oldest first, to records that must be kept
// (counted in Stats.Evicted).

type itemState uint8

const (
	statePending itemState = iota
	stateHeld
	stateUndeliverable
	stateGone
)

// kept reports whether a record in state st exists nowhere else: it must
// never be dropped to make room.
func (st itemState) kept() bool { return st == statePending || st == stateUndeliverable }

type item struct {
	seq     uint64
	e       Entry // Body and Substitute are nil while only on disk
	size    int64 // len(Body) + len(Substitute)
	state   itemState
	removed bool  // the compat channel's old record needs no removal: send only
	disk    int64 // bytes on disk; 0 when not on disk

	listEl *list.Element // in spool.lists[state]
	memEl  *list.Element // in spool.mem: bytes in memory that may be dropped
	pinned bool          // bytes in memory only, of a kept record: never dropped

	// The replay's per-task backoff after a failure that was the task's
	// own (not the broker away): the task is not tried before retryAt.
	retryAt time.Time
	fails   int
}

func (it *item) ext() string {
	switch it.state {
	case stateHeld:
		return extHeld
	case stateUndeliverable:
		return extUndeliverable
	}
	return extPending
}

type spool struct {
	log        *slog.Logger
	warn       *lograte.Limiter // records that repeat per entry (disk full, disk errors, spool full)
	disk       *disk            // nil without a data dir
	maxEntries int
	maxMem     int64
	maxDisk    int64

	mu       sync.Mutex
	seq      uint64
	lists    [stateGone]*list.List // *item by state, oldest first
	mem      *list.List            // *item whose bytes may be dropped, most recently used first
	memBytes int64
	pinnedN  int   // kept records in memory only
	pinnedB  int64 // their bytes
	// diskBytes counts bytes written and reserved.
	diskBytes int64
	// diskRefused: a kept record found no room on disk (the bound, or the
	// device full); cleared once disk bytes are freed.
	diskRefused bool
	byTask      map[string][]*item
	dropped     uint64
	evicted     uint64
	diskErrs    uint64

	full atomic.Bool // read without mu by Full
}

func newSpool(log *slog.Logger, logEvery time.Duration, d *disk, maxEntries int, maxMem, maxDisk int64) *spool {
	s := &spool{
		log: log, warn: lograte.New(log, logEvery), disk: d, maxEntries: maxEntries, maxMem: maxMem, maxDisk: maxDisk,
		mem: list.New(), byTask: make(map[string][]*item),
	}
	for i := range s.lists {
		s.lists[i] = list.New()
	}
	return s
}

// add spools e, on disk first when there is a data dir, and returns its item.
// It never fails and never drops a kept record: one the disk cannot take
// stays in memory (logged, counted) and may make the spool full.
func (s *spool) add(e Entry, st itemState, removed bool) *item {
	it := &item{e: e, size: int64(len(e.Body) + len(e.Substitute)), state: st, removed: removed}
	s.mu.Lock()
	s.seq++
	it.seq = s.seq
	reserved := int64(0)
	if s.disk != nil && s.reserveDisk(it.diskEstimate(), st.kept()) {
		reserved = it.diskEstimate()
	}
	s.mu.Unlock()

	var written int64
	var werr error
	if reserved > 0 {
		written, werr = s.disk.write(it.header(), e.Body, e.Substitute, it.ext())
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.diskBytes += written - reserved
	if werr != nil {
		s.diskFailed(it, werr)
	}
	it.disk = written
	it.listEl = s.lists[st].PushBack(it)
	s.byTask[e.TaskID] = append(s.byTask[e.TaskID], it)
	s.place(it)
	s.evictMem()
	s.checkFull()
	return it
}

// diskFailed notes a failed write of a record that stays in memory.
// Called with mu held.
func (s *spool) diskFailed(it *item, err error) {
	s.diskErrs++
	if isNoSpace(err) && it.state.kept() {
		s.diskRefused = true
	}
	s.warn.Log(context.Background(), slog.LevelError,
		"result spool disk write failed; record kept in memory until the disk or the broker takes it", "entry", it.e, "err", err)
}

// diskEstimate is at least the record's file size: the header's fixed
// fields fit in 512 bytes.
func (it *item) diskEstimate() int64 {
	return it.size + int64(len(it.e.TaskID)+len(it.e.Status)+len(it.e.ReplyTo)) + 512
}

func (it *item) header() diskHeader {
	return diskHeader{Seq: it.seq, TaskID: it.e.TaskID, Status: it.e.Status, Terminal: it.e.Terminal,
		ReplyTo: it.e.ReplyTo, CreatedAt: it.e.CreatedAt, Removed: it.removed}
}

// place accounts for it's bytes in memory: droppable when they are also on
// disk or the record is held, pinned otherwise. Called with mu held, for
// an item whose bytes are in memory and not yet accounted.
func (s *spool) place(it *item) {
	if it.e.Body == nil {
		return
	}
	if it.disk > 0 || !it.state.kept() {
		it.memEl = s.mem.PushFront(it)
		s.memBytes += it.size
		return
	}
	it.pinned = true
	s.pinnedN++
	s.pinnedB += it.size
}

// unplace undoes place. Called with mu held.
func (s *spool) unplace(it *item) {
	if it.memEl != nil {
		s.mem.Remove(it.memEl)
		it.memEl = nil
		s.memBytes -= it.size
	}
	if it.pinned {
		it.pinned = false
		s.pinnedN--
		s.pinnedB -= it.size
	}
}

// evictMem keeps the records in memory within the memory bounds by
// dropping droppable bytes, least recently used first: the in-memory copy
// of a record on disk, or a held record kept nowhere else. Pinned records
// count against the bounds and are never dropped. Called with mu held.
func (s *spool) evictMem() {
	for s.mem.Len() > 0 && (s.mem.Len()+s.pinnedN > s.maxEntries || s.memBytes+s.pinnedB > s.maxMem) {
		it := s.mem.Back().Value.(*item)
		s.unplace(it)
		if it.disk > 0 {
			it.e.Body, it.e.Substitute = nil, nil
			continue
		}
		s.evict(it, "memory bound reached")
	}
}

// evict drops a held record to make room for records that must be kept.
// Called with mu held.
func (s *spool) evict(it *item, why string) {
	s.evicted++
	s.warn.Warn("held result record dropped to make room: lookups of its whole body now fail (the broker holds its substitute)",
		"entry", it.e, "why", why)
	s.forget(it)
}

// checkFull updates full from the bounds and logs the change. Called with
// mu held after every change that can move it.
func (s *spool) checkFull() {
	full := s.pinnedN >= s.maxEntries || s.pinnedB >= s.maxMem || s.diskRefused
	was := s.full.Swap(full)
	switch {
	case full:
		s.warn.Warn("result spool full: take no new work until the broker takes spooled records",
			"pending", s.lists[statePending].Len(), "undeliverable", s.lists[stateUndeliverable].Len(),
			"memory_only", s.pinnedN, "memory_only_bytes", s.pinnedB, "max_entries", s.maxEntries, "max_memory_bytes", s.maxMem,
			"disk_bytes", s.diskBytes, "max_disk_bytes", s.maxDisk, "disk_refused", s.diskRefused)
	case was:
		s.warn.Info("result spool has room again", "pending", s.lists[statePending].Len(), "memory_only", s.pinnedN)
	}
}

// forget removes it from every index. Called with mu held.
func (s *spool) forget(it *item) {
	if it.state != stateGone {
		s.lists[it.state].Remove(it.listEl)
	}
	it.state = stateGone
	s.unplace(it)
	list := s.byTask[it.e.TaskID]
	for i, x := range list {
		if x == it {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(s.byTask, it.e.TaskID)
	} else {
		s.byTask[it.e.TaskID] = list
	}
}

// hasPending reports whether the task has records waiting for replay; a new
// record of that task must queue behind them.
func (s *spool) hasPending(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range s.byTask[id] {
		if it.state == statePending {
			return true
		}
	}
	return false
}

// settle ends a pending record after the broker took it (to stateGone: it
// leaves the spool; to stateHeld: an oversize record kept for lookups) or
// refused it for good (to stateUndeliverable).
func (s *spool) settle(it *item, to itemState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if it.state != statePending {
		return
	}
	if to == stateGone {
		if it.disk > 0 {
			if err := s.disk.remove(it.seq, extPending); err != nil {
				s.log.Error("result spool: removing replayed record failed", "entry", it.e, "err", err)
			}
			s.freeDisk(it.disk)
		}
		s.forget(it)
		s.checkFull()
		return
	}
	from := it.ext()
	s.lists[it.state].Remove(it.listEl)
	it.state = to
	it.listEl = s.lists[to].PushBack(it)
	if it.disk > 0 {
		if err := s.disk.rename(it.seq, from, it.ext()); err != nil {
			s.log.Error("result spool: keeping record on disk failed", "entry", it.e, "err", err)
		}
	}
	s.unplace(it)
	s.place(it)
	s.evictMem()
	s.checkFull()
}

// freeDisk returns n bytes to the disk bound. Called with mu held.
func (s *spool) freeDisk(n int64) {
	s.diskBytes -= n
	if n > 0 {
		s.diskRefused = false
	}
}

// markRemoved records that the compat channel's old record is gone, so a
// replay does not wait on the empty channel again. Memory only.
func (s *spool) markRemoved(it *item) {
	s.mu.Lock()
	it.removed = true
	s.mu.Unlock()
}

// snapshot returns the pending records of the tasks due for replay,
// grouped by task, tasks in the order of their oldest record, each task's
// records oldest first. A task whose oldest record failed on its own is due
// again at its retryAt; next is the earliest such time in the future (zero
// when none).
func (s *spool) snapshot(now time.Time) (groups [][]*item, next time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	idx := make(map[string]int)
	skip := make(map[string]bool)
	for el := s.lists[statePending].Front(); el != nil; el = el.Next() {
		it := el.Value.(*item)
		id := it.e.TaskID
		if skip[id] {
			continue
		}
		i, ok := idx[id]
		if !ok {
			if it.retryAt.After(now) {
				skip[id] = true
				if next.IsZero() || it.retryAt.Before(next) {
					next = it.retryAt
				}
				continue
			}
			i = len(groups)
			idx[id] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], it)
	}
	return groups, next
}

// deferRetry puts off the next replay of it's task after a failure of its
// own: first wait, doubling per failure up to maxWait.
func (s *spool) deferRetry(it *item, now time.Time, first, maxWait time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it.fails++
	d := first
	for i := 1; i < it.fails && d < maxWait; i++ {
		d *= 2
	}
	it.retryAt = now.Add(min(d, maxWait))
}

// entry returns it's record with its bytes, from memory or disk, and its
// state.
func (s *spool) entry(it *item) (e Entry, st itemState, removed bool, err error) {
	s.mu.Lock()
	e, st, removed = it.e, it.state, it.removed
	onDisk, ext := it.disk > 0, it.ext()
	if it.memEl != nil {
		s.mem.MoveToFront(it.memEl)
	}
	s.mu.Unlock()
	if e.Body != nil || !onDisk {
		return e, st, removed, nil
	}
	body, sub, err := s.disk.read(it.seq, ext)
	e.Body, e.Substitute = body, sub
	return e, st, removed, err
}

// lookup returns the task's best spooled record: its newest terminal one,
// else its newest.
func (s *spool) lookup(id string) (body []byte, terminal, ok bool) {
	s.mu.Lock()
	var best *item
	for _, it := range s.byTask[id] {
		if best == nil || it.e.Terminal || !best.e.Terminal {
			best = it
		}
	}
	s.mu.Unlock()
	if best == nil {
		return nil, false, false
	}
	e, _, _, err := s.entry(best)
	if err != nil {
		s.warn.Log(context.Background(), slog.LevelError, "result spool lookup failed", "entry", e, "err", err)
		return nil, false, false
	}
	return e.Body, e.Terminal, e.Body != nil
}

type spoolStats struct {
	pending, held, undeliverable, memOnly int
	diskBytes                             int64
	full                                  bool
	dropped, evicted, diskErrs            uint64
}

func (s *spool) stats() spoolStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return spoolStats{
		pending: s.lists[statePending].Len(), held: s.lists[stateHeld].Len(), undeliverable: s.lists[stateUndeliverable].Len(),
		memOnly: s.pinnedN, diskBytes: s.diskBytes, full: s.full.Load(),
		dropped: s.dropped, evicted: s.evicted, diskErrs: s.diskErrs,
	}
}
