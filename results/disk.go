package results

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/inferq/inferq/datadir"
)

// The disk spool keeps one file per record, named by its spool sequence:
// <seq>.rec waits for replay, <seq>.held is kept for lookups only (an
// oversize record whose substitute the broker holds; older versions also
// kept refused records there), <seq>.undeliverable is a record the broker
// refused for good, kept for lookups and never sent again. A file is a JSON header line followed by the body and
// the substitute. Files are written to <seq>.<ext>.<random>.tmp (created
// anew, never through a link: package datadir), fsynced, renamed and the
// directory fsynced, so a crash leaves a whole record or none; the header's
// CRC catches anything else. One file per record keeps removal after replay
// a single unlink and lets lookups read one record without scanning a log.

const (
	extPending       = ".rec"
	extHeld          = ".held"
	extUndeliverable = ".undeliverable"
	extTmp           = ".tmp"
	extBad           = ".bad"
	maxHeader        = 64 << 10
)

// errCorrupt marks a spool file whose content is wrong (no header, a
// length or checksum that does not match): reading it again cannot help.
var errCorrupt = errors.New("results: spool file corrupt")

type diskHeader struct {
	Seq       uint64    `json:"seq"`
	TaskID    string    `json:"task_id"`
	Status    string    `json:"status,omitempty"`
	Terminal  bool      `json:"terminal"`
	ReplyTo   string    `json:"reply_to,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	Removed   bool      `json:"removed,omitempty"`
	BodyLen   int       `json:"body_len"`
	SubLen    int       `json:"sub_len"`
	CRC       uint32    `json:"crc"`
}

// disk is the file side of the spool. It holds no state besides the
// directory; the spool serialises calls about one record.
type disk struct{ dir string }

func (d disk) path(seq uint64, ext string) string {
	return filepath.Join(d.dir, d.name(seq, ext))
}

// name is a record file's name in the directory.
func (d disk) name(seq uint64, ext string) string { return fmt.Sprintf("%020d%s", seq, ext) }

func checksum(body, sub []byte) uint32 {
	return crc32.Update(crc32.ChecksumIEEE(body), crc32.IEEETable, sub)
}

// write stores a record durably and returns the file's size: a new
// temporary file renamed over the record's name (datadir.WriteFileAtomic:
// 0600, never through a link), the directory synced.
func (d disk) write(h diskHeader, body, sub []byte, ext string) (int64, error) {
	h.BodyLen, h.SubLen, h.CRC = len(body), len(sub), checksum(body, sub)
	hdr, err := json.Marshal(h)
	if err != nil {
		return 0, fmt.Errorf("encode spool header: %w", err)
	}
	size := int64(len(hdr) + 1 + len(body) + len(sub))
	err = datadir.WriteFileAtomic(d.dir, d.name(h.Seq, ext), func(f io.Writer) error {
		w := bufio.NewWriterSize(f, 64<<10)
		_, _ = w.Write(hdr)
		_ = w.WriteByte('\n')
		_, _ = w.Write(body)
		_, _ = w.Write(sub)
		return w.Flush()
	})
	if err != nil {
		return 0, fmt.Errorf("write spool file: %w", err)
	}
	return size, nil
}

func (d disk) syncDir() error { return datadir.SyncDir(d.dir) }

// rename moves a record between states (pending to held).
func (d disk) rename(seq uint64, from, to string) error {
	if err := os.Rename(d.path(seq, from), d.path(seq, to)); err != nil {
		return fmt.Errorf("move spool file: %w", err)
	}
	return d.syncDir()
}

// remove deletes a record; a crash before the unlink reaches the disk only
// replays the record again (delivery is at least once).
func (d disk) remove(seq uint64, ext string) error {
	if err := os.Remove(d.path(seq, ext)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove spool file: %w", err)
	}
	return nil
}

// read returns a record's body and substitute, checked against its CRC.
func (d disk) read(seq uint64, ext string) (body, sub []byte, err error) {
	data, err := datadir.ReadFile(d.dir, d.name(seq, ext)) // never through a link
	if err != nil {
		return nil, nil, fmt.Errorf("read spool file: %w", err)
	}
	i := bytes.IndexByte(data, '\n')
	if i < 0 {
		return nil, nil, fmt.Errorf("%w: %s: no header", errCorrupt, d.path(seq, ext))
	}
	var h diskHeader
	if err := json.Unmarshal(data[:i], &h); err != nil {
		return nil, nil, fmt.Errorf("%w: %s: header: %w", errCorrupt, d.path(seq, ext), err)
	}
	rest := data[i+1:]
	if h.BodyLen < 0 || h.SubLen < 0 || len(rest) != h.BodyLen+h.SubLen {
		return nil, nil, fmt.Errorf("%w: %s: %d bytes after the header, header says %d+%d",
			errCorrupt, d.path(seq, ext), len(rest), h.BodyLen, h.SubLen)
	}
	body, sub = rest[:h.BodyLen:h.BodyLen], rest[h.BodyLen:]
	if checksum(body, sub) != h.CRC {
		return nil, nil, fmt.Errorf("%w: %s: checksum mismatch", errCorrupt, d.path(seq, ext))
	}
	return body, sub, nil
}

// diskRecord is a record found by load; bodies stay on disk until needed.
type diskRecord struct {
	h     diskHeader
	state itemState
	size  int64
}

// fileState is the state of a record file by its extension; false for
// any other file.
func fileState(ext string) (itemState, bool) {
	switch ext {
	case extPending:
		return statePending, true
	case extHeld:
		return stateHeld, true
	case extUndeliverable:
		return stateUndeliverable, true
	}
	return stateGone, false
}

// load lists the records a previous process left, in sequence order. Files
// that cannot be read (a link among them) are renamed *.bad and reported
// in bad; leftover temporary files are removed. The directory is created
// 0700; one that group or others may write is refused (datadir.MkdirAll).
func (d disk) load() (recs []diskRecord, bad []error, err error) {
	if err := datadir.MkdirAll(d.dir); err != nil {
		return nil, nil, fmt.Errorf("spool dir: %w", err)
	}
	ents, err := os.ReadDir(d.dir)
	if err != nil {
		return nil, nil, fmt.Errorf("read spool dir: %w", err)
	}
	for _, de := range ents { // ReadDir sorts by name: zero-padded seq order
		name := de.Name()
		ext := filepath.Ext(name)
		if ext == extTmp {
			_ = os.Remove(filepath.Join(d.dir, name))
			continue
		}
		if _, ok := fileState(ext); !ok {
			continue
		}
		seq, perr := strconv.ParseUint(strings.TrimSuffix(name, ext), 10, 64)
		if perr != nil {
			continue
		}
		rec, rerr := d.header(seq, ext)
		if rerr != nil {
			bad = append(bad, rerr)
			_ = os.Rename(d.path(seq, ext), d.path(seq, ext+extBad))
			continue
		}
		recs = append(recs, rec)
	}
	return recs, bad, nil
}

func (d disk) header(seq uint64, ext string) (diskRecord, error) {
	f, err := datadir.OpenFile(d.dir, d.name(seq, ext), os.O_RDONLY) // never through a link
	if err != nil {
		return diskRecord{}, fmt.Errorf("open spool file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return diskRecord{}, fmt.Errorf("stat spool file: %w", err)
	}
	line, err := bufio.NewReader(io.LimitReader(f, maxHeader)).ReadBytes('\n')
	if err != nil {
		return diskRecord{}, fmt.Errorf("spool file %s: header: %w", d.path(seq, ext), err)
	}
	var h diskHeader
	if err := json.Unmarshal(line, &h); err != nil {
		return diskRecord{}, fmt.Errorf("spool file %s: header: %w", d.path(seq, ext), err)
	}
	if h.Seq != seq || h.TaskID == "" || int64(len(line))+int64(h.BodyLen)+int64(h.SubLen) != st.Size() {
		return diskRecord{}, fmt.Errorf("spool file %s: header does not match the file", d.path(seq, ext))
	}
	state, _ := fileState(ext)
	return diskRecord{h: h, state: state, size: st.Size()}, nil
}
