package results

import (
	"container/list"
	"context"
	"log/slog"
)

// The disk side of the spool: loading what a previous process left, the
// disk bound, and the flush at Close.

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
			size: int64(h.BodyLen + h.SubLen), removed: h.Removed, disk: r.size,
		}
		if r.held {
			it.state = stateHeld
			it.listEl = s.held.PushBack(it)
		} else {
			it.listEl = s.pending.PushBack(it)
		}
		s.byTask[h.TaskID] = append(s.byTask[h.TaskID], it)
		s.diskBytes += r.size
		s.seq = max(s.seq, h.Seq)
	}
}

// reserveDisk makes room for n bytes, evicting the oldest held records from
// disk if needed. Called with mu held.
func (s *spool) reserveDisk(n int64) bool {
	for s.diskBytes+n > s.maxDisk {
		el := s.held.Front()
		for el != nil && el.Value.(*item).disk == 0 {
			el = el.Next()
		}
		if el == nil {
			s.warn.Log(context.Background(), slog.LevelError, "result disk spool full; record kept in memory only",
				"disk_bytes", s.diskBytes, "max_disk_bytes", s.maxDisk)
			return false
		}
		it := el.Value.(*item)
		if err := s.disk.remove(it.seq, extHeld); err != nil {
			s.log.Error("result spool: removing held record failed", "entry", it.e, "err", err)
		}
		s.diskBytes -= it.disk
		it.disk = 0
		s.log.Warn("result disk spool full; oldest held record left disk", "entry", it.e)
		if it.memEl == nil {
			s.lose(it, "disk spool full")
		}
	}
	s.diskBytes += n
	return true
}

// bad drops a pending record whose file cannot be read back: the file is
// renamed *.bad for inspection, and the loss logged and counted.
func (s *spool) bad(it *item, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if it.state == stateGone {
		return
	}
	ext := it.ext()
	if it.disk > 0 {
		_ = s.disk.rename(it.seq, ext, ext+extBad)
		s.diskBytes -= it.disk
		it.disk = 0
	}
	s.log.Error("spooled result unreadable; renamed *.bad", "entry", it.e, "err", err)
	s.dropped++
	s.forget(it)
}

// flush writes the records held only in memory to disk.
func (s *spool) flush() (written, failed int) {
	if s.disk == nil {
		return 0, 0
	}
	s.mu.Lock()
	var todo []*item
	for _, l := range []*list.List{s.pending, s.held} {
		for el := l.Front(); el != nil; el = el.Next() {
			if it := el.Value.(*item); it.disk == 0 && it.memEl != nil {
				todo = append(todo, it)
			}
		}
	}
	s.mu.Unlock()
	for _, it := range todo {
		s.mu.Lock()
		e, st, hdr := it.e, it.state, it.header()
		if st == stateGone || it.memEl == nil {
			s.mu.Unlock()
			continue
		}
		reserved := it.diskEstimate()
		ok := s.reserveDisk(reserved)
		s.mu.Unlock()
		if !ok {
			failed++
			continue
		}
		ext := extPending
		if st == stateHeld {
			ext = extHeld
		}
		n, err := s.disk.write(hdr, e.Body, e.Substitute, ext)
		s.mu.Lock()
		s.diskBytes += n - reserved
		switch {
		case err != nil:
			s.diskErrs++
			failed++
			s.log.Error("result spool flush failed", "entry", e, "err", err)
		case it.state != st: // settled while writing
			_ = s.disk.remove(it.seq, ext)
			s.diskBytes -= n
		default:
			it.disk = n
			written++
		}
		s.mu.Unlock()
	}
	return written, failed
}
