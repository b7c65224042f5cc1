package results

import (
	"container/list"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/inferq/inferq/lograte"
)

// The spool holds records the broker does not have yet (pending, replayed by
// Run) and whole records the broker has only a substitute for, or refused
// for good (held, kept for lookups). Bytes of at most maxEntries records
// (and maxMem bytes) stay in memory, least recently used evicted first. With
// a data dir every record is also on disk, so eviction only drops the
// in-memory copy; without one an evicted record is gone: logged at error
// level and counted in Stats.Dropped.

type itemState uint8

const (
	statePending itemState = iota
	stateHeld
	stateGone
)

type item struct {
	seq     uint64
	e       Entry // Body and Substitute are nil while only on disk
	size    int64 // len(Body) + len(Substitute)
	state   itemState
	removed bool  // the compat channel's old record was already removed
	disk    int64 // bytes on disk; 0 when not on disk

	listEl *list.Element // in spool.pending or spool.held
	memEl  *list.Element // in spool.mem while the bytes are in memory
}

func (it *item) ext() string {
	if it.state == stateHeld {
		return extHeld
	}
	return extPending
}

type spool struct {
	log        *slog.Logger
	warn       *lograte.Limiter // records that repeat per entry (disk full)
	disk       *disk            // nil without a data dir
	maxEntries int
	maxMem     int64
	maxDisk    int64

	mu        sync.Mutex
	seq       uint64
	pending   *list.List // *item, oldest first
	held      *list.List // *item, oldest first
	mem       *list.List // *item, most recently used first
	memBytes  int64
	diskBytes int64 // written and reserved
	byTask    map[string][]*item
	dropped   uint64
	diskErrs  uint64
}

func newSpool(log *slog.Logger, logEvery time.Duration, d *disk, maxEntries int, maxMem, maxDisk int64) *spool {
	return &spool{
		log: log, warn: lograte.New(log, logEvery), disk: d, maxEntries: maxEntries, maxMem: maxMem, maxDisk: maxDisk,
		pending: list.New(), held: list.New(), mem: list.New(), byTask: make(map[string][]*item),
	}
}

// add spools e, on disk first when there is a data dir, and returns its item.
// It never fails: a record the disk cannot take stays in memory (logged).
func (s *spool) add(e Entry, st itemState, removed bool) *item {
	it := &item{e: e, size: int64(len(e.Body) + len(e.Substitute)), state: st, removed: removed}
	s.mu.Lock()
	s.seq++
	it.seq = s.seq
	reserved := int64(0)
	if s.disk != nil && s.reserveDisk(it.diskEstimate()) {
		reserved = it.diskEstimate()
	}
	s.mu.Unlock()

	var written int64
	if reserved > 0 {
		n, err := s.disk.write(it.header(), e.Body, e.Substitute, it.ext())
		if err != nil {
			s.warn.Log(context.Background(), slog.LevelError, "result spool disk write failed; record kept in memory only", "entry", e, "err", err)
		}
		written = n
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.diskBytes += written - reserved
	if reserved > 0 && written == 0 {
		s.diskErrs++
	}
	it.disk = written
	if st == statePending {
		it.listEl = s.pending.PushBack(it)
	} else {
		it.listEl = s.held.PushBack(it)
	}
	s.byTask[e.TaskID] = append(s.byTask[e.TaskID], it)
	it.memEl = s.mem.PushFront(it)
	s.memBytes += it.size
	s.evictMem()
	return it
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

// evictMem enforces the memory bounds, never evicting the newest record.
// Called with mu held.
func (s *spool) evictMem() {
	for s.mem.Len() > 1 && (s.mem.Len() > s.maxEntries || s.memBytes > s.maxMem) {
		it := s.mem.Back().Value.(*item)
		s.mem.Remove(it.memEl)
		it.memEl = nil
		s.memBytes -= it.size
		if it.disk > 0 {
			it.e.Body, it.e.Substitute = nil, nil
			continue
		}
		s.lose(it, "memory spool full and no disk copy")
	}
}

// lose drops a record that exists nowhere else. Called with mu held.
func (s *spool) lose(it *item, why string) {
	s.dropped++
	if it.state == statePending {
		s.log.Error("result record lost: spool overflow before the broker took it", "entry", it.e, "why", why)
	} else {
		s.log.Error("held result record dropped: lookups of it now fail", "entry", it.e, "why", why)
	}
	s.forget(it)
}

// forget removes it from every index. Called with mu held.
func (s *spool) forget(it *item) {
	switch it.state {
	case statePending:
		s.pending.Remove(it.listEl)
	case stateHeld:
		s.held.Remove(it.listEl)
	}
	it.state = stateGone
	if it.memEl != nil {
		s.mem.Remove(it.memEl)
		it.memEl = nil
		s.memBytes -= it.size
	}
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

// settle ends a pending record after the broker took it (or refused it for
// good): hold keeps it for lookups, otherwise it leaves the spool.
func (s *spool) settle(it *item, hold bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if it.state != statePending {
		return
	}
	if !hold {
		if it.disk > 0 {
			if err := s.disk.remove(it.seq, extPending); err != nil {
				s.log.Error("result spool: removing replayed record failed", "entry", it.e, "err", err)
			}
			s.diskBytes -= it.disk
		}
		s.forget(it)
		return
	}
	if it.disk > 0 {
		if err := s.disk.rename(it.seq, extPending, extHeld); err != nil {
			s.log.Error("result spool: keeping record on disk failed", "entry", it.e, "err", err)
		}
	}
	s.pending.Remove(it.listEl)
	it.state = stateHeld
	it.listEl = s.held.PushBack(it)
}

// markRemoved records that the compat channel's old record is gone, so a
// replay does not wait on the empty channel again. Memory only.
func (s *spool) markRemoved(it *item) {
	s.mu.Lock()
	it.removed = true
	s.mu.Unlock()
}

// snapshot returns the pending records grouped by task, tasks in the order
// of their oldest record, each task's records oldest first.
func (s *spool) snapshot() [][]*item {
	s.mu.Lock()
	defer s.mu.Unlock()
	idx := make(map[string]int)
	var groups [][]*item
	for el := s.pending.Front(); el != nil; el = el.Next() {
		it := el.Value.(*item)
		i, ok := idx[it.e.TaskID]
		if !ok {
			i = len(groups)
			idx[it.e.TaskID] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], it)
	}
	return groups
}

// entry returns it's record with its bytes, from memory or disk, and whether
// it is still pending.
func (s *spool) entry(it *item) (Entry, bool, bool, error) {
	s.mu.Lock()
	e, st, removed, onDisk, ext := it.e, it.state, it.removed, it.disk > 0, it.ext()
	if it.memEl != nil {
		s.mem.MoveToFront(it.memEl)
	}
	s.mu.Unlock()
	if e.Body != nil || !onDisk {
		return e, st == statePending, removed, nil
	}
	body, sub, err := s.disk.read(it.seq, ext)
	e.Body, e.Substitute = body, sub
	return e, st == statePending, removed, err
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
		s.log.Error("result spool lookup failed", "entry", e, "err", err)
		return nil, false, false
	}
	return e.Body, e.Terminal, e.Body != nil
}

type spoolStats struct {
	pending, held     int
	dropped, diskErrs uint64
}

func (s *spool) stats() spoolStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return spoolStats{pending: s.pending.Len(), held: s.held.Len(), dropped: s.dropped, diskErrs: s.diskErrs}
}
