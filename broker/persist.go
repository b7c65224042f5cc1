package broker

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/kubemq-io/protobuf/go"
)

// Persistence: see doc.go.

const (
	recPut   byte = 1
	recRecv  byte = 2
	recGone  byte = 3
	recTail  byte = 4
	recEvent byte = 5
	recSeq   byte = 6
)

// persister logs the store's changes. A nil *persister is a broker without
// a data dir; callers check for nil, so memory-only brokers pay one branch.
type persister struct {
	dir  string
	opts *Options
	log  *slog.Logger
	w    *wal

	mu   sync.Mutex
	keys map[*pb.QueueMessage]uint64
	next uint64

	compactMu sync.Mutex // one compaction at a time
	compactCh chan uint64
	// logged counts the bytes of the full segments since the last
	// snapshot (writer goroutine only); snapBytes is that snapshot's size.
	logged    int64
	snapBytes atomic.Int64
	compacted chan struct{}
	failOnce  sync.Once
}

// key returns m's key, giving it one when it has none; fresh: it had none.
// p.mu is held.
func (p *persister) keyLocked(m *pb.QueueMessage) (k uint64, fresh bool) {
	if k, ok := p.keys[m]; ok {
		return k, false
	}
	p.next++
	p.keys[m] = p.next
	return p.next, true
}

// put logs m as stored, unless it was already (a dead letter copy logged
// when it was made).
func (p *persister) put(m *pb.QueueMessage) {
	p.mu.Lock()
	k, fresh := p.keyLocked(m)
	p.mu.Unlock()
	if !fresh {
		return
	}
	p.logPut(k, m)
}

// putNew logs m as stored (m has no key yet).
func (p *persister) putNew(m *pb.QueueMessage) {
	p.mu.Lock()
	k, _ := p.keyLocked(m)
	p.mu.Unlock()
	p.logPut(k, m)
}

func (p *persister) logPut(k uint64, m *pb.QueueMessage) {
	p.w.append(recPut, func(b []byte) []byte {
		b = binary.AppendUvarint(b, k)
		out, err := appendProto(b, m)
		if err != nil { // a message the broker holds always marshals
			p.fail(fmt.Errorf("broker: encode message %s: %w", m.MessageID, err))
			return b
		}
		return out
	})
}

// recv logs m's receive count.
func (p *persister) recv(m *pb.QueueMessage) {
	k, ok := p.lookup(m)
	if !ok {
		return
	}
	count := uint64(max(m.Attributes.ReceiveCount, 0))
	p.w.append(recRecv, func(b []byte) []byte {
		return binary.AppendUvarint(binary.AppendUvarint(b, k), count)
	})
}

// gone logs m as gone for good and forgets its key.
func (p *persister) gone(m *pb.QueueMessage) {
	p.mu.Lock()
	k, ok := p.keys[m]
	delete(p.keys, m)
	p.mu.Unlock()
	if ok {
		p.w.append(recGone, func(b []byte) []byte { return binary.AppendUvarint(b, k) })
	}
}

// tail logs m as sent back to the tail of its queue.
func (p *persister) tail(m *pb.QueueMessage) {
	if k, ok := p.lookup(m); ok {
		p.w.append(recTail, func(b []byte) []byte { return binary.AppendUvarint(b, k) })
	}
}

func (p *persister) lookup(m *pb.QueueMessage) (uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k, ok := p.keys[m]
	return k, ok
}

// event logs an events store event.
func (p *persister) event(e *pb.EventReceive) {
	p.w.append(recEvent, func(b []byte) []byte {
		out, err := appendProto(b, e)
		if err != nil {
			p.fail(fmt.Errorf("broker: encode event %s: %w", e.EventID, err))
			return b
		}
		return out
	})
}

// forget drops m's key: m, logged, was refused.
func (p *persister) forget(m *pb.QueueMessage) {
	p.mu.Lock()
	delete(p.keys, m)
	p.mu.Unlock()
}

// sync waits until everything logged so far is on disk.
func (p *persister) sync() error {
	return p.await(p.mark())
}

// mark is the number of the last record logged, for await.
func (p *persister) mark() uint64 { return p.w.last() }

// await waits until the records up to n are on disk.
func (p *persister) await(n uint64) error {
	err := p.w.wait(n)
	if err != nil {
		p.fail(err)
	}
	return err
}

// failed returns the log's failure, nil while it works: once the log has
// failed, sends are refused (refused) until a restart.
func (p *persister) failed() error {
	return p.w.failed()
}

// refused is the error of a send that the data dir could not keep: it is
// not stored, nowhere (no message delivered from memory only).
func refused(err error) error {
	return fmt.Errorf("broker: send refused, the data dir cannot store it (restart the broker once the disk has room): %w", err)
}

// fail logs the log's failure once: from then on sends are refused, and
// what was stored goes on from memory (acks and deliveries are not kept).
func (p *persister) fail(err error) {
	p.failOnce.Do(func() {
		p.log.Error("broker data dir failed: sends are refused until a restart; acks and deliveries are no longer kept on disk",
			"dir", p.dir, "err", err)
	})
}

// rotated hands a full segment to the compactor without waiting, once the
// full segments since the last snapshot are as big as it: a compaction
// rewrites every live message and event, so a big backlog is rewritten
// after as many bytes of log, not after every segment, and the disk holds
// at most about twice the live data and three segments.
func (p *persister) rotated(seg uint64, size int64) {
	p.logged += size
	if p.logged < p.snapBytes.Load() {
		return
	}
	p.logged = 0
	select {
	case p.compactCh <- seg:
	default:
		select { // replace an older, not yet started, request
		case <-p.compactCh:
		default:
		}
		select {
		case p.compactCh <- seg:
		default:
		}
	}
}

// compactor runs compactions until compactCh closes.
func (p *persister) compactor() {
	defer close(p.compacted)
	for seg := range p.compactCh {
		if err := p.compact(seg); err != nil {
			p.log.Error("broker data dir compaction failed", "dir", p.dir, "through_segment", seg, "err", err)
		}
	}
}

// compact replaces the snapshot and segments up to seg with one snapshot.
func (p *persister) compact(seg uint64) error {
	p.compactMu.Lock()
	defer p.compactMu.Unlock()
	files, err := listDataDir(p.dir)
	if err != nil {
		return err
	}
	st, err := loadState(p.dir, files, seg, p.opts)
	if err != nil {
		return err
	}
	st.bound(time.Now())
	size, err := writeSnapshot(p.dir, seg, st, p.opts.diskFault)
	if err != nil {
		return err
	}
	p.snapBytes.Store(size)
	removeOld(p.dir, files, seg, p.log)
	return nil
}

// close writes what is pending and stops the writer and the compactor.
func (p *persister) close() error {
	err := p.w.close()
	close(p.compactCh)
	<-p.compacted
	return err
}

// dataFiles lists a data dir: its snapshots and segments, by number.
type dataFiles struct {
	snaps, segs []uint64
}

func listDataDir(dir string) (dataFiles, error) {
	var f dataFiles
	ents, err := os.ReadDir(dir)
	if err != nil {
		return f, fmt.Errorf("broker: read data dir %s: %w", dir, err)
	}
	for _, e := range ents {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, "snap-") && !strings.HasSuffix(name, ".tmp"):
			if n, err := strconv.ParseUint(strings.TrimPrefix(name, "snap-"), 10, 64); err == nil {
				f.snaps = append(f.snaps, n)
			}
		case strings.HasPrefix(name, "wal-") && strings.HasSuffix(name, ".log"):
			if n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, "wal-"), ".log"), 10, 64); err == nil {
				f.segs = append(f.segs, n)
			}
		}
	}
	slices.Sort(f.snaps)
	slices.Sort(f.segs)
	return f, nil
}

// last is the highest snapshot or segment number, 0 for an empty dir.
func (f dataFiles) last() uint64 {
	var n uint64
	if len(f.snaps) > 0 {
		n = f.snaps[len(f.snaps)-1]
	}
	if len(f.segs) > 0 {
		n = max(n, f.segs[len(f.segs)-1])
	}
	return n
}

// state is what a replay rebuilds.
type state struct {
	bounds eventBounds // the events store's, applied while loading too
	msgs   map[uint64]*liveMsg
	order  uint64
	maxKey uint64
	events map[string]*eventLog
	torn   int // segments whose torn tail was skipped
}

type liveMsg struct {
	key   uint64
	m     *pb.QueueMessage
	order uint64
}

type eventLog struct {
	last   uint64
	events []*pb.EventReceive
	bytes  int64 // eventBytes of events
}

func newState(opts *Options) *state {
	return &state{
		bounds: eventBounds{retention: opts.Retention, maxEvents: opts.EventsStoreMaxEvents, maxBytes: opts.EventsStoreMaxBytes},
		msgs:   map[uint64]*liveMsg{}, events: map[string]*eventLog{},
	}
}

// loadState replays the newest snapshot and the segments after it, up to
// through.
func loadState(dir string, files dataFiles, through uint64, opts *Options) (*state, error) {
	log := opts.Logger
	st := newState(opts)
	var from uint64
	if n := len(files.snaps); n > 0 {
		from = files.snaps[n-1]
		path := snapshotName(dir, from)
		n, torn, err := scanFile(path, st.apply)
		if err != nil {
			return nil, err
		}
		if torn {
			return nil, fmt.Errorf("broker: snapshot %s is corrupt after byte %d", path, n)
		}
	}
	for _, seg := range files.segs {
		if seg <= from || seg > through {
			continue
		}
		path := segmentName(dir, seg)
		n, torn, err := scanFile(path, st.apply)
		if err != nil {
			return nil, err
		}
		if torn {
			st.torn++
			log.Warn("broker data dir: skipped a torn tail (records never acknowledged)", "segment", path, "after_byte", n)
		}
	}
	return st, nil
}

// apply replays one record.
func (st *state) apply(typ byte, b []byte) error {
	switch typ {
	case recPut:
		k, n := binary.Uvarint(b)
		if n <= 0 {
			return errors.New("put record: bad key")
		}
		m := &pb.QueueMessage{}
		if err := m.Unmarshal(b[n:]); err != nil {
			return fmt.Errorf("put record: %w", err)
		}
		if m.Attributes == nil {
			m.Attributes = &pb.QueueMessageAttributes{}
		}
		if m.Policy == nil {
			m.Policy = &pb.QueueMessagePolicy{}
		}
		st.order++
		st.msgs[k] = &liveMsg{key: k, m: m, order: st.order}
		st.maxKey = max(st.maxKey, k)
	case recRecv:
		k, n := binary.Uvarint(b)
		c, n2 := binary.Uvarint(b[max(n, 0):])
		if n <= 0 || n2 <= 0 {
			return errors.New("recv record: bad fields")
		}
		if l := st.msgs[k]; l != nil {
			l.m.Attributes.ReceiveCount = int32(min(c, 1<<31-1))
		}
	case recGone, recTail:
		k, n := binary.Uvarint(b)
		if n <= 0 {
			return errors.New("gone or tail record: bad key")
		}
		if typ == recGone {
			delete(st.msgs, k)
		} else if l := st.msgs[k]; l != nil {
			st.order++
			l.order = st.order
		}
	case recEvent:
		e := &pb.EventReceive{}
		if err := e.Unmarshal(b); err != nil {
			return fmt.Errorf("event record: %w", err)
		}
		el := st.eventLog(e.Channel)
		if n := len(el.events); n > 0 && e.Sequence != el.events[n-1].Sequence+1 {
			// Never written so: keep the log gapless, as the store indexes it.
			if e.Sequence <= el.events[n-1].Sequence {
				return nil
			}
			el.events, el.bytes = el.events[:0], 0
		}
		el.events = append(el.events, e)
		el.bytes += eventBytes(e)
		el.last = max(el.last, e.Sequence)
		st.trim(el)
	case recSeq:
		last, n := binary.Uvarint(b)
		if n <= 0 {
			return errors.New("sequence record: bad fields")
		}
		el := st.eventLog(string(b[n:]))
		el.last = max(el.last, last)
	default:
		return fmt.Errorf("unknown record type %d", typ)
	}
	return nil
}

func (st *state) eventLog(channel string) *eventLog {
	el := st.events[channel]
	if el == nil {
		el = &eventLog{}
		st.events[channel] = el
	}
	return el
}

// trim applies the count and bytes bounds to el once it holds twice as
// much, so that a replay holds no more than that.
func (st *state) trim(el *eventLog) {
	b := st.bounds
	if (b.maxEvents <= 0 || len(el.events) <= 2*b.maxEvents) && (b.maxBytes <= 0 || el.bytes <= 2*b.maxBytes) {
		return
	}
	b.retention = 0
	el.dropOldest(b.drop(len(el.events), el.bytes, time.Time{}, el.at))
}

func (el *eventLog) at(i int) *pb.EventReceive { return el.events[i] }

// dropOldest drops the first n events, letting go of their memory.
func (el *eventLog) dropOldest(n int) {
	for _, e := range el.events[:n] {
		el.bytes -= eventBytes(e)
	}
	el.events = slices.Clone(el.events[n:])
}

// bound applies the events store's retention and bounds.
func (st *state) bound(now time.Time) {
	for _, el := range st.events {
		el.dropOldest(st.bounds.drop(len(el.events), el.bytes, now, el.at))
	}
}

// sorted returns the live messages in replay order.
func (st *state) sorted() []*liveMsg {
	out := make([]*liveMsg, 0, len(st.msgs))
	for _, l := range st.msgs {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b *liveMsg) int {
		switch {
		case a.order < b.order:
			return -1
		case a.order > b.order:
			return 1
		}
		return 0
	})
	return out
}

// writeSnapshot writes st as snapshot n: a temporary file, fsynced, renamed,
// and the directory fsynced. The snapshot is there whole or not at all: a
// failed write (a full disk) removes the temporary file and leaves the
// files it would have replaced as they were.
func writeSnapshot(dir string, n uint64, st *state, fault faultFunc) (int64, error) {
	path := snapshotName(dir, n)
	tmp := path + ".tmp"
	size, err := writeSnapshotTemp(tmp, st, fault)
	if err == nil {
		if err = fault.check("rename", tmp); err == nil {
			err = os.Rename(tmp, path)
		}
		if err != nil {
			err = fmt.Errorf("broker: rename snapshot %s: %w", tmp, err)
		}
	}
	if err != nil {
		if rerr := os.Remove(tmp); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = fmt.Errorf("%w (and removing it: %w)", err, rerr)
		}
		return 0, err
	}
	return size, syncDir(dir, fault)
}

// writeSnapshotTemp writes st to tmp and fsyncs it.
func writeSnapshotTemp(tmp string, st *state, fault faultFunc) (int64, error) {
	if err := fault.check("create", tmp); err != nil {
		return 0, fmt.Errorf("broker: create %s: %w", tmp, err)
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, fmt.Errorf("broker: create %s: %w", tmp, err)
	}
	cw := &countWriter{w: faultWriter{w: f, fault: fault, path: tmp}}
	err = writeState(cw, st)
	if err == nil {
		if err = fault.check("sync", tmp); err == nil {
			err = f.Sync()
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("broker: write snapshot %s: %w", tmp, err)
	}
	return cw.n, nil
}

// countWriter counts what it writes.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// writeState writes st's records to w, a record at a time.
func writeState(w io.Writer, st *state) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	var buf []byte
	var err error
	record := func(typ byte, body func([]byte) []byte) error {
		buf = walAppend(buf[:0], typ, body)
		if err != nil {
			return err
		}
		_, werr := bw.Write(buf)
		return werr
	}
	for _, l := range st.sorted() {
		if e := record(recPut, func(b []byte) []byte {
			var out []byte
			out, err = appendProto(binary.AppendUvarint(b, l.key), l.m)
			return out
		}); e != nil {
			return fmt.Errorf("message %s: %w", l.m.MessageID, e)
		}
	}
	for ch, el := range st.events {
		for _, ev := range el.events {
			if e := record(recEvent, func(b []byte) []byte {
				var out []byte
				out, err = appendProto(b, ev)
				return out
			}); e != nil {
				return fmt.Errorf("event %s: %w", ev.EventID, e)
			}
		}
		if e := record(recSeq, func(b []byte) []byte {
			return append(binary.AppendUvarint(b, el.last), ch...)
		}); e != nil {
			return e
		}
	}
	return bw.Flush()
}

// removeOld removes the snapshots and segments that snapshot n replaces.
func removeOld(dir string, files dataFiles, n uint64, log *slog.Logger) {
	for _, s := range files.snaps {
		if s < n {
			rm(snapshotName(dir, s), log)
		}
	}
	for _, s := range files.segs {
		if s <= n {
			rm(segmentName(dir, s), log)
		}
	}
}

func rm(path string, log *slog.Logger) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		log.Warn("broker data dir: remove failed", "path", path, "err", err)
	}
}

// openPersister replays dir into s's stores, compacts what it found into
// one snapshot and starts a new segment.
func openPersister(s *Server) (*persister, error) {
	dir := s.opts.DataDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("broker: create data dir %s: %w", dir, err)
	}
	files, err := listDataDir(dir)
	if err != nil {
		return nil, err
	}
	// A snapshot a crash left half written.
	tmps, _ := filepath.Glob(filepath.Join(dir, "snap-*.tmp"))
	for _, tmp := range tmps {
		rm(tmp, s.log)
	}
	last := files.last()
	st, err := loadState(dir, files, last, &s.opts)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	st.bound(now)
	var snapBytes int64
	if last > 0 {
		// A disk without room for the snapshot (it holds the live data
		// once more) does not stop the start: the files found stay, and
		// a later compaction replaces them.
		if snapBytes, err = writeSnapshot(dir, last, st, s.opts.diskFault); err != nil {
			s.log.Warn("broker data dir: could not compact at start, going on with the files found", "dir", dir, "err", err)
			snapBytes = 0
		} else {
			removeOld(dir, files, last, s.log)
		}
	}
	p := &persister{
		dir: dir, opts: &s.opts, log: s.log,
		keys: make(map[*pb.QueueMessage]uint64, len(st.msgs)), next: st.maxKey,
		compactCh: make(chan uint64, 1), compacted: make(chan struct{}),
	}
	p.snapBytes.Store(snapBytes)
	live := st.sorted()
	for _, l := range live {
		p.keys[l.m] = l.key
	}
	s.queues.restore(live, now.UnixNano())
	s.pubsub.restore(st.events)
	s.log.Info("broker data dir loaded", "dir", dir, "messages", len(live), "events_channels", len(st.events), "torn_tails_skipped", st.torn)
	p.w, err = openWAL(dir, last+1, s.opts.SegmentBytes, s.opts.diskFault, p.rotated)
	if err != nil {
		return nil, err
	}
	go p.compactor()
	return p, nil
}

// gogoMessage is a kubemq protobuf message (gogo generated: it marshals
// itself).
type gogoMessage interface {
	Size() int
	MarshalTo([]byte) (int, error)
}

// appendProto appends m's encoding to b.
func appendProto(b []byte, m gogoMessage) ([]byte, error) {
	start, n := len(b), m.Size()
	b = slices.Grow(b, n)[:start+n]
	k, err := m.MarshalTo(b[start:])
	if err != nil {
		return b[:start], err
	}
	return b[:start+k], nil
}
