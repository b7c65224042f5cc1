package broker

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// The data directory's log: see doc.go.

const (
	walHeader = 8
	// walMaxRecord bounds a record's length so that a garbage header is a
	// torn tail and not a huge allocation.
	walMaxRecord = 1 << 30
)

var walCRC = crc32.MakeTable(crc32.Castagnoli)

// walAppend encodes one record of type typ at the end of buf; body appends
// the payload.
func walAppend(buf []byte, typ byte, body func([]byte) []byte) []byte {
	start := len(buf)
	buf = append(buf, make([]byte, walHeader)...)
	buf = append(buf, typ)
	buf = body(buf)
	n := len(buf) - start - walHeader
	binary.LittleEndian.PutUint32(buf[start:], uint32(n))
	binary.LittleEndian.PutUint32(buf[start+4:], crc32.Checksum(buf[start+walHeader:], walCRC))
	return buf
}

// walScan calls fn with every intact record read from r, in order; the
// payload it passes is only valid during the call. It returns how many
// bytes the intact records took; a record that is short, too long or fails
// its CRC ends the scan there (torn is then true). Only a read error or fn's
// error is an error.
func walScan(r io.Reader, fn func(typ byte, payload []byte) error) (n int64, torn bool, err error) {
	br := bufio.NewReaderSize(r, 1<<16)
	var hdr [walHeader]byte
	var body []byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return walEnd(n, err, err != io.EOF)
		}
		size := binary.LittleEndian.Uint32(hdr[:])
		if hdr == [walHeader]byte{} {
			return n, false, nil // the zeros of a segment filled ahead (prepare)
		}
		if size == 0 || size > walMaxRecord {
			return n, true, nil
		}
		// Read in steps, so that a garbage length is not an allocation of
		// up to walMaxRecord before the data runs out.
		body = body[:0]
		for len(body) < int(size) {
			k := min(int(size)-len(body), 1<<20)
			body = slices.Grow(body, k)
			got, err := io.ReadFull(br, body[len(body):len(body)+k])
			body = body[:len(body)+got]
			if err != nil {
				return walEnd(n, err, true)
			}
		}
		if crc32.Checksum(body, walCRC) != binary.LittleEndian.Uint32(hdr[4:]) {
			return n, true, nil
		}
		if err := fn(body[0], body[1:]); err != nil {
			return n, false, err
		}
		n += walHeader + int64(size)
	}
}

// walEnd ends a scan at a read error: the end of the data (torn when it
// cut a record) or a real error.
func walEnd(n int64, err error, torn bool) (int64, bool, error) {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return n, torn, nil
	}
	return n, false, err
}

// scanFile scans the segment or snapshot at path.
func scanFile(path string, fn func(typ byte, payload []byte) error) (n int64, torn bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false, fmt.Errorf("broker: open %s: %w", path, err)
	}
	defer f.Close()
	n, torn, err = walScan(f, fn)
	if err != nil {
		return n, torn, fmt.Errorf("broker: read %s: %w", path, err)
	}
	return n, torn, nil
}

func segmentName(dir string, n uint64) string {
	return filepath.Join(dir, fmt.Sprintf("wal-%016d.log", n))
}

func snapshotName(dir string, n uint64) string {
	return filepath.Join(dir, fmt.Sprintf("snap-%016d", n))
}

// wal appends records to the current segment through one writer goroutine.
// Its methods are safe for concurrent use.
//
// The writer writes at once when someone waits for a record (wait: a send,
// a settlement, an events store send); records nobody waits for
// (deliveries) wait up to walLazyWrite for such a write to take them along,
// so that they do not start an fsync of their own that the next send would
// have to wait behind.
type wal struct {
	dir      string
	segBytes int64
	fault    faultFunc
	rotated  func(seg uint64, size int64) // called by the writer after it closed a full segment

	kick chan struct{} // wakes the writer (cap 1): a wait, a first record, or closing

	mu       sync.Mutex
	flushed  *sync.Cond // synced moved, or err set
	buf      []byte
	spare    []byte
	since    time.Time // when the oldest record of buf was appended
	appended uint64    // records appended
	want     uint64    // the highest record someone waits for (wait)
	synced   uint64    // records written and fsynced
	err      error
	closing  bool

	f    *os.File // owned by the writer goroutine
	seg  uint64
	size int64
	done chan struct{}

	// The next segment, zero-filled ahead of need (prepare); the writer
	// starts it when the current one is full, or as soon as it is ready
	// when the current one was not zero-filled (the first one after an
	// open). prepare sets next, then closes prepDone.
	zeroed   bool          // the current segment was zero-filled
	prepDone chan struct{} // the preparation for the current segment; nil before
	next     *os.File
}

// walLazyWrite is how long a record nobody waits for may wait to be
// written with others.
const walLazyWrite = 10 * time.Millisecond

// openWAL starts segment seg in dir (which must not hold it) and its writer.
func openWAL(dir string, seg uint64, segBytes int64, fault faultFunc, rotated func(uint64, int64)) (*wal, error) {
	w := &wal{dir: dir, segBytes: segBytes, fault: fault, rotated: rotated, seg: seg, kick: make(chan struct{}, 1), done: make(chan struct{})}
	w.flushed = sync.NewCond(&w.mu)
	f, err := createSynced(segmentName(dir, seg), os.O_APPEND, fault)
	if err != nil {
		return nil, err
	}
	w.f = f
	go w.run()
	return w, nil
}

// createSynced creates path (it must not exist) for writing, with flag's
// extra flags, and fsyncs its directory, so the file survives a crash.
func createSynced(path string, flag int, fault faultFunc) (*os.File, error) {
	if err := fault.check("create", path); err != nil {
		return nil, fmt.Errorf("broker: create %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|flag, 0o600)
	if err != nil {
		return nil, fmt.Errorf("broker: create %s: %w", path, err)
	}
	if err := syncDir(filepath.Dir(path), fault); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func syncDir(dir string, fault faultFunc) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("broker: open data dir %s: %w", dir, err)
	}
	defer d.Close()
	err = fault.check("sync", dir)
	if err == nil {
		err = d.Sync()
	}
	if err != nil {
		return fmt.Errorf("broker: fsync data dir %s: %w", dir, err)
	}
	return nil
}

// append adds one record and returns its number, for wait. After the log
// failed or closed it drops the record (wait reports the failure).
func (w *wal) append(typ byte, body func([]byte) []byte) uint64 {
	w.mu.Lock()
	if w.err != nil {
		n := w.appended
		w.mu.Unlock()
		return n
	}
	first := len(w.buf) == 0
	if first {
		w.since = time.Now()
	}
	w.buf = walAppend(w.buf, typ, body)
	w.appended++
	n := w.appended
	w.mu.Unlock()
	if first {
		w.wake() // the writer times the lazy write from it
	}
	return n
}

func (w *wal) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// failed returns the log's failure, nil while it works.
func (w *wal) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// last is the number of the last record appended.
func (w *wal) last() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.appended
}

// wait blocks until record n is on disk, or the log failed; the writer
// writes it at once.
func (w *wal) wait(n uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n > w.want {
		w.want = n
		if n > w.synced {
			w.wake()
		}
	}
	for w.synced < n && w.err == nil {
		w.flushed.Wait()
	}
	if w.synced >= n {
		return nil
	}
	return w.err
}

// run is the writer: it writes and fsyncs what was appended, as one batch,
// when someone waits for it or walLazyWrite after its first record, until
// close.
func (w *wal) run() {
	defer close(w.done)
	lazy := time.NewTimer(time.Hour)
	lazy.Stop()
	for {
		w.mu.Lock()
		if w.err != nil || (len(w.buf) == 0 && w.closing) {
			w.mu.Unlock()
			if w.f != nil {
				w.f.Close()
			}
			return
		}
		if len(w.buf) == 0 {
			w.mu.Unlock()
			<-w.kick
			continue
		}
		if due := time.Until(w.since.Add(walLazyWrite)); due > 0 && w.want <= w.synced && !w.closing {
			w.mu.Unlock()
			lazy.Reset(due)
			select {
			case <-w.kick:
			case <-lazy.C:
			}
			lazy.Stop()
			continue
		}
		w.gatherLocked()
		buf, target := w.buf, w.appended
		w.buf = w.spare[:0]
		w.mu.Unlock()
		err := w.write(buf)
		w.mu.Lock()
		if cap(buf) <= 4<<20 {
			w.spare = buf[:0]
		}
		if err != nil {
			w.err = err
		} else {
			w.synced = target
		}
		w.flushed.Broadcast()
		w.mu.Unlock()
	}
}

// gatherLocked lets the records still coming join the write: when more
// were appended after the one waited for (a stream's requests, read one
// after the other while its first answer waits), the writer waits while
// they keep coming, walGatherPause at a time, up to walGatherMax. A lone
// waiter is written at once. w.mu is held; it is released while waiting.
func (w *wal) gatherLocked() {
	if w.closing || w.want <= w.synced || w.appended <= w.want {
		return
	}
	start := time.Now()
	for time.Since(start) < walGatherMax {
		seen := w.appended
		w.mu.Unlock()
		pause()
		w.mu.Lock()
		if w.appended == seen {
			return
		}
	}
}

// walGatherPause and walGatherMax bound gatherLocked: about a tenth of a
// fast fsync, and a fraction of a slow one.
const (
	walGatherPause = 50 * time.Microsecond
	walGatherMax   = time.Millisecond
)

// write writes buf to the segment, fsyncs it, and starts the next segment
// when this one is full.
//
// The fsync is an fdatasync: the data and what reading it back needs (the
// size of a file that grew), not the times. A segment is zero-filled ahead
// of need (prepare), so that writing it changes no metadata and its
// fdatasyncs commit no file system journal: on a disk shared with other
// writers that is what an fsync mostly waits for (issue 25 item 7).
func (w *wal) write(buf []byte) error {
	name := w.f.Name()
	err := w.fault.check("write", name)
	if err == nil {
		_, err = w.f.Write(buf)
	}
	if err == nil {
		if err = w.fault.check("sync", name); err == nil {
			err = fdatasync(w.f)
		}
	}
	if err != nil { // *os.PathError: the operation and the file
		return fmt.Errorf("broker: data dir log: %w", err)
	}
	w.size += int64(len(buf))
	if w.prepDone == nil && (w.size >= w.segBytes/2 || (!w.zeroed && w.size >= walPrepareAfter)) {
		w.prepDone = make(chan struct{})
		go w.prepare(w.seg+1, w.prepDone)
	}
	if w.size < w.segBytes && (w.zeroed || !closed(w.prepDone)) {
		return nil
	}
	if err := w.f.Close(); err != nil {
		return fmt.Errorf("broker: close %s: %w", w.f.Name(), err)
	}
	full, size := w.seg, w.size
	w.f = nil
	<-w.prepDone // started half a segment ago: done by now, as a rule
	f := w.next
	w.next, w.prepDone = nil, nil
	w.zeroed = f != nil
	if f == nil {
		if f, err = createSynced(segmentName(w.dir, full+1), os.O_APPEND, w.fault); err != nil {
			return err
		}
	}
	w.f, w.seg, w.size = f, full+1, 0
	if w.rotated != nil {
		w.rotated(full, size)
	}
	return nil
}

// walPrepareMax bounds the zero-filling of a segment (SegmentBytes may be
// set high); past it a segment grows as it is written. walPrepareAfter is
// how much a segment that was not zero-filled holds before the next one is
// prepared (a broker that writes little never fills one).
const (
	walPrepareMax   = 64 << 20
	walPrepareAfter = 1 << 20
)

// closed reports whether ch is closed; false for nil.
func closed(ch chan struct{}) bool {
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// prepare creates segment seg zero-filled, fsynced, its directory entry
// too, for the writer to start; then it closes done. A failure (no room)
// leaves nothing: the writer then creates the segment itself. A crash
// leaves a zero-filled segment, which reads as an empty one.
func (w *wal) prepare(seg uint64, done chan struct{}) {
	defer close(done)
	path := segmentName(w.dir, seg)
	f, err := createSynced(path, 0, w.fault) // not O_APPEND: it is written from the start
	if err != nil {
		return
	}
	if err := zeroFill(f, min(w.segBytes, walPrepareMax), w.fault); err != nil {
		f.Close()
		os.Remove(path)
		return
	}
	w.next = f
}

// zeroFill writes n zero bytes at the start of f, fdatasyncs them and
// leaves f's offset at 0.
func zeroFill(f *os.File, n int64, fault faultFunc) error {
	zeros := make([]byte, min(n, 1<<20))
	for left := n; left > 0; left -= int64(len(zeros)) {
		if err := fault.check("write", f.Name()); err != nil {
			return err
		}
		if _, err := f.Write(zeros[:min(left, int64(len(zeros)))]); err != nil {
			return err
		}
	}
	if err := fault.check("sync", f.Name()); err != nil {
		return err
	}
	if err := fdatasync(f); err != nil {
		return err
	}
	_, err := f.Seek(0, io.SeekStart)
	return err
}

// close writes what is pending and stops the writer. It returns the log's
// error, if it failed.
func (w *wal) close() error {
	w.mu.Lock()
	w.closing = true
	w.mu.Unlock()
	w.wake()
	<-w.done
	if w.prepDone != nil {
		<-w.prepDone
	}
	if w.next != nil { // never written: no segment
		w.next.Close()
		os.Remove(w.next.Name())
		w.next = nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.err
	if err == nil && w.synced < w.appended {
		err = errors.New("broker: data dir log closed with records unwritten")
	}
	if w.err == nil {
		w.err = errWALClosed // later appends are dropped, waits answer
	}
	w.flushed.Broadcast()
	return err
}

var errWALClosed = errors.New("broker: data dir log closed")

// faultFunc, in tests only (Options.diskFault), makes the data dir's file
// operations fail as a full or broken disk would: it is asked before each
// create, write, fsync ("sync") and rename of a file of the data dir, with
// the operation and the path, and an error it returns is that operation's.
type faultFunc func(op, path string) error

func (f faultFunc) check(op, path string) error {
	if f == nil {
		return nil
	}
	if err := f(op, path); err != nil {
		return &os.PathError{Op: op, Path: path, Err: err}
	}
	return nil
}

// faultWriter is w, asking fault before each write.
type faultWriter struct {
	w     io.Writer
	fault faultFunc
	path  string
}

func (f faultWriter) Write(b []byte) (int, error) {
	if err := f.fault.check("write", f.path); err != nil {
		return 0, err
	}
	return f.w.Write(b)
}
