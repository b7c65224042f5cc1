package results

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"syscall"
)

// The disk side of the spool: loading what a previous process left, the
// disk bound, read failures, and writing memory-only records to disk (in
// Run once the disk takes them again, and at Close).

// restore adds the records a previous process left on disk.
func (s *spool) restore(recs []diskRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		h := r.h
		it := &item{
			seq: h.Seq,
			e: Entry{TaskID: h.TaskID, Status: h.Status, Terminal: h.Terminal,
				ReplyTo: h.ReplyTo, CreatedAt: h.CreatedAt},
			size: int64(h.BodyLen + h.SubLen), removed: h.Removed, disk: r.size, state: r.state,
		}
		it.listEl = s.lists[it.state].PushBack(it)
		s.byTask[h.TaskID] = append(s.byTask[h.TaskID], it)
		s.diskBytes += r.size
		s.seq = max(s.seq, h.Seq)
	}
	s.checkFull()
}

// reserveDisk makes room for n bytes, taking the oldest held records off
// disk if needed (never a kept one), and reports whether it did. A kept
// record that finds no room makes the spool full. Called with mu held.
func (s *spool) reserveDisk(n int64, kept bool) bool {
	for s.diskBytes+n > s.maxDisk {
		el := s.lists[stateHeld].Front()
		for el != nil && el.Value.(*item).disk == 0 {
			el = el.Next()
		}
		if el == nil {
			if kept {
				s.diskRefused = true
			}
			s.warn.Log(context.Background(), slog.LevelError, "result disk spool full; record kept in memory until there is room",
				"disk_bytes", s.diskBytes, "max_disk_bytes", s.maxDisk)
			return false
		}
		it := el.Value.(*item)
		if err := s.disk.remove(it.seq, extHeld); err != nil {
			s.log.Error("result spool: removing held record failed", "entry", it.e, "err", err)
		}
		s.diskBytes -= it.disk
		it.disk = 0
		s.unplace(it)
		if it.e.Body == nil {
			s.evict(it, "disk spool full")
		} else {
			s.place(it) // now in memory only
		}
	}
	s.diskBytes += n
	return true
}

// isNoSpace reports whether a disk write failed because the device is full.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// unreadable handles a record whose bytes could not be read back, and
// reports whether the record is gone. A file that is corrupt or missing
// can never be replayed: it is renamed *.bad (kept for inspection), the
// record leaves the spool, and the loss is logged and counted. Any other
// read error may pass (an I/O error, no file descriptors): the record stays
// and is tried again later; the error is counted and logged (rate-limited).
func (s *spool) unreadable(it *item, err error) (gone bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if it.state == stateGone {
		return true
	}
	if !errors.Is(err, errCorrupt) && !errors.Is(err, os.ErrNotExist) {
		s.diskErrs++
		s.warn.Log(context.Background(), slog.LevelError, "spooled result could not be read; kept, tried again later", "entry", it.e, "err", err)
		return false
	}
	ext := it.ext()
	if it.disk > 0 {
		_ = s.disk.rename(it.seq, ext, ext+extBad)
		s.freeDisk(it.disk)
		it.disk = 0
	}
	s.log.Error("spooled result unreadable; renamed *.bad", "entry", it.e, "err", err)
	s.dropped++
	s.forget(it)
	s.checkFull()
	return true
}

// flush writes records held only in memory to disk: kept records first,
// so that they no longer pin memory, then held ones (only when all is
// true, at Close). With stopOnError it gives up at the first failure (the
// disk is still failing or full; Run tries again later). It returns how
// many it wrote and how many kept records are still in memory only.
func (s *spool) flush(all, stopOnError bool) (written, left int) {
	if s.disk == nil {
		return 0, s.stats().memOnly
	}
	s.mu.Lock()
	var todo []*item
	for _, st := range []itemState{statePending, stateUndeliverable, stateHeld} {
		if st == stateHeld && !all {
			continue
		}
		for el := s.lists[st].Front(); el != nil; el = el.Next() {
			if it := el.Value.(*item); it.disk == 0 && it.e.Body != nil {
				todo = append(todo, it)
			}
		}
	}
	s.mu.Unlock()
	for _, it := range todo {
		ok := s.flushOne(it)
		if ok {
			written++
		} else if stopOnError {
			break
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evictMem()
	s.checkFull()
	return written, s.pinnedN
}

// flushOne writes one memory-only record to disk; false when the disk
// refused it.
func (s *spool) flushOne(it *item) bool {
	s.mu.Lock()
	e, st, hdr, ext := it.e, it.state, it.header(), it.ext()
	if st == stateGone || it.disk > 0 || e.Body == nil {
		s.mu.Unlock()
		return true
	}
	reserved := it.diskEstimate()
	ok := s.reserveDisk(reserved, st.kept())
	s.mu.Unlock()
	if !ok {
		return false
	}
	n, err := s.disk.write(hdr, e.Body, e.Substitute, ext)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.diskBytes += n - reserved
	switch {
	case err != nil:
		s.diskFailed(it, err)
		return false
	case it.state != st: // settled while writing
		_ = s.disk.remove(it.seq, ext)
		s.freeDisk(n)
	default:
		it.disk = n
		s.unplace(it)
		s.place(it) // droppable now
	}
	return true
}
