package crash

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
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
	"syscall"
	"time"

	"github.com/inferq/inferq/datadir"
	"github.com/inferq/inferq/lograte"
)

// Journal counts the attempts that ended with the process: KubeMQ gives a
// message back uncounted when its consumer dies (KUBEMQ.md), so a task that
// kills the worker would loop forever unless inferq counts those attempts
// itself.
//
// Right before a message's inference run starts, Start records its id;
// when the run ends, Done forgets it. Ids still started when a process
// ends are crashes: the next process reads them at open and Crashes reports
// how many times each died. With a directory the journal is a file that
// survives the process (written with write(2) before the run starts, so a
// crash of the process, not of the machine, cannot lose it); without one it
// lives in memory and counts only what this process saw (a stream lost while
// holding a message).
//
// The file is bounded: it is rewritten (compacted) with the open ids and
// the carried crash counts alone at each open and whenever the appended
// lines outgrow it; a carried count whose id is not seen crashing again is
// dropped after journalCarryGenerations rewrites, and at most
// journalMaxCarried are kept.
//
// A full (or failing) disk: a crash is counted only for a run whose start
// was recorded and whose end was not. A start the disk refuses, even in
// part, is not recorded: Start returns the error and cuts the file back to
// its last whole line, so no torn bytes join the next line. An end is
// recorded in the bytes its start already took (the start line's 'S'
// overwritten with 'D', which needs no new space on ext4 or XFS), so a
// full disk cannot turn a run that ended into a crash; where that write
// fails too (a copy-on-write file system) the end is appended, and when
// that fails it is kept and written before the next lines. Meanwhile the
// journal warns once a minute at most, counts the failed writes and
// reports itself failing (Stats); it turns healthy at its next write that
// succeeds, or the next probe (Stats, every journalProbeEvery while
// failing). A rewrite the disk refuses at open leaves the old file as it is
// (the next process reads the same crashes) and the journal failing until
// a later one succeeds: a full disk does not stop a process from serving.
//
// Safe for concurrent use.
type Journal struct {
	mu   sync.Mutex
	log  *slog.Logger
	warn *lograte.Limiter // the failing disk's warning, once a minute at most
	f    *os.File         // the file, open for writing; nil: memory only, or not open yet (dir set)
	w    io.WriterAt      // f, through JournalConfig.WrapWriter
	wrap func(io.WriterAt) io.WriterAt
	now  func() time.Time
	dir  string // the journal's directory; "": memory only
	path string // dir/journalFile, for errors and logs
	buf  []byte
	// open holds, per token started in this process and not done, the
	// offset of each start's line in the file (-1: a start not written).
	open    map[string][]int64
	pending map[string]struct{} // tokens whose end the disk refused: appended before the next lines
	crashes map[string]carried  // token -> crashes recorded by earlier processes
	gen     uint64              // rewrites of the file so far: the age of a carried count
	id      string              // this journal's id (journalIDLen hex digits): names its crash reports
	size    int64               // bytes in the file (whole lines)
	base    int64               // bytes in the file after its last rewrite

	errs       uint64        // writes the disk refused
	failing    bool          // the last write failed (Stats)
	dirty      bool          // a failed write's bytes may follow size: cut before the next write
	lastProbe  time.Time     // the last write tried while failing
	probeEvery time.Duration // journalProbeEvery; tests change it
}

// JournalStats is the journal's health: what /readyz and the metrics
// say of it.
type JournalStats struct {
	// WriteErrors counts the writes the disk refused.
	WriteErrors uint64
	// Failing: the last write failed (the data dir full?), so a crash of
	// a task run meanwhile may not be counted.
	Failing bool
}

// journalWarning is the failing disk's warning (rate-limited).
const journalWarning = "attempt journal not written (data dir full or failing?): a crash during the tasks running meanwhile may not be counted; tasks go on"

// carried is the crash count of one id and the generation (rewrite) in
// which it last grew.
type carried struct {
	n   int
	gen uint64
}

// The file: a header line, then one line per record, each id written as a
// token (Token):
//
//	# inferq attempt journal 2 <generation>
//	J <id>                             the journal's id (written by rewrites)
//	C <token> <crashes> <generation>   a carried count (written by rewrites)
//	S <token>                          a run starts
//	D <token>                          a run ended
//
// Only whole lines count: a last line without its newline is a torn write
// and is not read.
const (
	journalFile    = "attempts.journal"
	journalMagic   = "# inferq attempt journal"
	journalVersion = "2"

	// journalMaxVerbatimID is the longest id written quoted; a longer one
	// is written as its SHA-256, so a line is never longer than
	// journalMaxLine (quoting at most quadruples an id).
	journalMaxVerbatimID = 512
	journalMaxLine       = 4096
	journalHashPrefix    = "sha256:"

	// journalCompactBytes is how many bytes appended since the last
	// rewrite trigger the next one (or the size of that rewrite, when
	// larger, so that compaction costs amortised O(1) per line).
	journalCompactBytes = 4 << 20
	// journalCarryGenerations is how many rewrites a carried count
	// survives without its id crashing again. Rewrites happen at each
	// start and every journalCompactBytes of lines (~50k tasks), so a
	// count is kept through 64 restarts or millions of tasks: far longer
	// than a redelivered message takes to come back.
	journalCarryGenerations = 64
	// journalMaxCarried caps the carried counts; past it the oldest go
	// first (then the smallest).
	journalMaxCarried = 10_000
	// journalMaxCount bounds a count read from the file.
	journalMaxCount = 1 << 30
	// journalIDLen is the length of a journal's id: 128 random bits in
	// hex.
	journalIDLen = 32

	// journalMaxPending bounds the ends kept for a disk that refuses
	// every write (in-place marks included); past it the next restart
	// may count an ended run as a crash.
	journalMaxPending = 10_000
	// journalProbeEvery is how often a failing journal tries a write
	// when asked (Stats) and none came.
	journalProbeEvery = 5 * time.Second
	// journalLogEvery is how often the failing disk's warning repeats.
	journalLogEvery = time.Minute
)

// newJournalID returns a fresh random journal id.
func newJournalID() string {
	var b [journalIDLen / 2]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// isJournalID reports whether s is a journal id: journalIDLen lowercase
// hex digits.
func isJournalID(s string) bool { return isHex(s, journalIDLen) }

// isHex reports whether s is n lowercase hex digits.
func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// journalHeader is the file's first line for generation gen.
func journalHeader(gen uint64) string {
	return journalMagic + " " + journalVersion + " " + strconv.FormatUint(gen, 10) + "\n"
}

// Token is how the journal and crash reports (Count.Token) write and key
// a message id: quoted with strconv.Quote, which escapes every control
// byte (newlines included), quote, backslash and invalid UTF-8, so a token
// is one line, its end is found by strconv.QuotedPrefix whatever spaces
// the id holds, it reads back to the same bytes, and ordinary ids stay
// readable to an operator. Ids longer than journalMaxVerbatimID are
// written as "sha256:<hex>", which no quoted token starts with.
func Token(id string) string {
	if len(id) > journalMaxVerbatimID {
		sum := sha256.Sum256([]byte(id))
		return journalHashPrefix + hex.EncodeToString(sum[:])
	}
	return strconv.Quote(id)
}

// parseToken reads the token at the start of s; it accepts only what
// Token writes, so that one id has one token.
func parseToken(s string) (tok, rest string, ok bool) {
	if strings.HasPrefix(s, `"`) {
		q, err := strconv.QuotedPrefix(s)
		if err != nil {
			return "", "", false
		}
		id, err := strconv.Unquote(q)
		if err != nil || Token(id) != q {
			return "", "", false
		}
		return q, s[len(q):], true
	}
	const n = len(journalHashPrefix) + 2*sha256.Size
	if len(s) < n || !strings.HasPrefix(s, journalHashPrefix) {
		return "", "", false
	}
	for _, c := range []byte(s[len(journalHashPrefix):n]) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", "", false
		}
	}
	return s[:n], s[n:], true
}

// JournalConfig configures a Journal.
type JournalConfig struct {
	// Dir holds the file; "" keeps the journal in memory. It is created
	// 0700 (datadir.MkdirAll) and refused when group or others may write
	// it; the file is opened through package datadir: never through a
	// symlink, created 0600.
	Dir string
	// Logger receives warnings about the file (an old format, damaged
	// lines, dropped counts, a disk that refuses writes); nil discards
	// them.
	Logger *slog.Logger
	// WrapWriter, when set, wraps every write of the file: the appends
	// and in-place marks of the open file and each rewrite's new file.
	// Tests make the disk full with it; nil: the file itself.
	WrapWriter func(io.WriterAt) io.WriterAt
	// Now is the clock of the probes (default time.Now; tests).
	Now func() time.Time
}

// OpenJournal opens (or creates) the journal in dir without a logger;
// dir "" keeps it in memory.
func OpenJournal(dir string) (*Journal, error) {
	return NewJournal(JournalConfig{Dir: dir})
}

// NewJournal opens (or creates) the journal in cfg.Dir, reads the crashes
// of earlier processes and rewrites the file with them. A file in the old
// format (ids written raw) is ignored with a warning: an id holding a
// newline could have written any line into it, so none of it can be
// trusted. A file from a newer format is refused and left as it is. A
// rewrite the disk refuses is no error: the journal starts failing (see
// Journal) and retries it.
func NewJournal(cfg JournalConfig) (*Journal, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.WrapWriter == nil {
		cfg.WrapWriter = func(w io.WriterAt) io.WriterAt { return w }
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	j := &Journal{log: cfg.Logger, warn: lograte.New(cfg.Logger, journalLogEvery), wrap: cfg.WrapWriter, now: cfg.Now,
		probeEvery: journalProbeEvery, open: map[string][]int64{}, pending: map[string]struct{}{}, crashes: map[string]carried{}}
	if cfg.Dir == "" {
		j.id = newJournalID()
		return j, nil
	}
	if err := datadir.MkdirAll(cfg.Dir); err != nil {
		return nil, fmt.Errorf("crash: journal dir: %w", err)
	}
	j.dir, j.path = cfg.Dir, filepath.Join(cfg.Dir, journalFile)
	j.removeTemps()
	if err := j.load(); err != nil {
		return nil, err
	}
	if j.id == "" {
		j.id = newJournalID()
	}
	if err := j.rewrite(); err != nil {
		if !diskRefused(err) {
			return nil, err
		}
		_ = j.failedLocked(err) // not shared yet: no lock needed
	}
	return j, nil
}

// diskRefused reports whether err is the disk refusing a write (full,
// over quota, failing), which the journal outlives, rather than a file it
// cannot use at all (a link, a directory, no permission), which stops
// NewJournal.
func diskRefused(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EIO) || errors.Is(err, syscall.EROFS)
}

// load reads the file into j.crashes and j.gen.
func (j *Journal) load() error {
	f, err := datadir.OpenFile(j.dir, journalFile, os.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("crash: read journal: %w", err) // names the file
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, journalMaxLine)
	first, _, err := nextLine(r)
	if err == io.EOF {
		return nil // empty, or a first line torn (rewrites are atomic: never ours)
	}
	if err != nil {
		return fmt.Errorf("crash: read journal %s: %w", j.path, err)
	}
	if !bytes.HasPrefix(first, []byte(journalMagic)) {
		size := int64(-1)
		if st, err := f.Stat(); err == nil {
			size = st.Size()
		}
		j.log.Warn("attempt journal in the old format ignored: it wrote ids raw, so a line an id injected cannot be told from a real one; crashes of the previous process are not counted",
			"path", j.path, "bytes", size)
		return nil
	}
	gen, ok := parseHeader(string(first))
	if !ok {
		return fmt.Errorf("crash: attempt journal %s: header %.80q is not format %s (written by another inferq version?); move the file away to start",
			j.path, first, journalVersion)
	}
	started := map[string]int{}
	bad := 0
	for {
		line, long, err := nextLine(r)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("crash: read journal %s: %w", j.path, err)
		}
		if long || !j.loadLine(string(line), gen, started) {
			bad++
		}
	}
	if bad > 0 {
		j.log.Warn("attempt journal lines skipped: damaged", "path", j.path, "lines", bad)
	}
	for tok, n := range started {
		c := j.crashes[tok]
		j.crashes[tok] = carried{n: min(c.n+n, journalMaxCount), gen: gen + 1}
	}
	j.gen = gen
	return nil
}

// parseHeader reads the generation from the header line.
func parseHeader(line string) (gen uint64, ok bool) {
	rest, ok := strings.CutPrefix(line, journalMagic+" "+journalVersion+" ")
	if !ok {
		return 0, false
	}
	gen, err := strconv.ParseUint(rest, 10, 64)
	if err != nil || gen > 1<<62 || strconv.FormatUint(gen, 10) != rest {
		return 0, false
	}
	return gen, true
}

// loadLine applies one line of a file of generation gen; false: it does
// not parse.
func (j *Journal) loadLine(line string, gen uint64, started map[string]int) bool {
	if len(line) < 3 || line[1] != ' ' {
		return false
	}
	if line[0] == 'J' {
		if !isJournalID(line[2:]) {
			return false
		}
		j.id = line[2:]
		return true
	}
	tok, rest, ok := parseToken(line[2:])
	if !ok {
		return false
	}
	switch line[0] {
	case 'S':
		if rest != "" {
			return false
		}
		started[tok]++
	case 'D':
		if rest != "" {
			return false
		}
		delete(started, tok)
		delete(j.crashes, tok)
	case 'C':
		ns, gs, ok := strings.Cut(strings.TrimPrefix(rest, " "), " ")
		if !ok || !strings.HasPrefix(rest, " ") {
			return false
		}
		n, err1 := strconv.Atoi(ns)
		g, err2 := strconv.ParseUint(gs, 10, 64)
		if err1 != nil || err2 != nil || n < 1 || n > journalMaxCount || g > gen {
			return false
		}
		j.crashes[tok] = carried{n: n, gen: g}
	default:
		return false
	}
	return true
}

// nextLine returns the next whole line without its newline; long reports
// a line over journalMaxLine, skipped. A last line without its newline is
// a torn write: dropped, and io.EOF returned.
func nextLine(r *bufio.Reader) (line []byte, long bool, err error) {
	line, err = r.ReadSlice('\n')
	for errors.Is(err, bufio.ErrBufferFull) {
		long = true
		_, err = r.ReadSlice('\n')
	}
	if err != nil {
		return nil, false, err
	}
	if long {
		return nil, true, nil
	}
	return line[:len(line)-1], false, nil
}

// rewrite replaces the file with the carried counts and the open ids
// through datadir.WriteFileAtomic (a new temporary file, created O_EXCL
// 0600, synced, renamed over the journal, the directory synced), so the
// file is always whole, old or new, and a link placed where it goes is
// replaced, never written through.
//
// The open ids' start lines get their new offsets, and the ends kept for
// a refusing disk are no longer needed (their starts are not in the new
// file). On error nothing changes: the old file and its offsets stay.
func (j *Journal) rewrite() error {
	gen := j.gen + 1
	j.trimCarried(gen)
	var b bytes.Buffer
	b.WriteString(journalHeader(gen))
	fmt.Fprintf(&b, "J %s\n", j.id)
	for tok, c := range j.crashes {
		fmt.Fprintf(&b, "C %s %d %d\n", tok, c.n, c.gen)
	}
	open := make(map[string][]int64, len(j.open))
	for tok, offs := range j.open {
		at := make([]int64, len(offs))
		for i := range offs {
			at[i] = int64(b.Len())
			fmt.Fprintf(&b, "S %s\n", tok)
		}
		open[tok] = at
	}
	err := datadir.WriteFileAtomic(j.dir, journalFile, func(w io.Writer) error {
		wa, ok := w.(io.WriterAt)
		if !ok {
			return errors.New("the temporary file takes no WriteAt")
		}
		_, err := j.wrap(wa).WriteAt(b.Bytes(), 0)
		return err
	})
	if err != nil {
		return fmt.Errorf("crash: rewrite journal: %w", err) // names the file
	}
	// Not O_APPEND: lines are written at size, the end of the last whole
	// one, and ends over their start lines (WriteAt).
	f, err := datadir.OpenFile(j.dir, journalFile, os.O_WRONLY)
	if err != nil {
		return fmt.Errorf("crash: open journal: %w", err)
	}
	if j.f != nil {
		_ = j.f.Close()
	}
	j.f, j.w, j.gen, j.open = f, j.wrap(f), gen, open
	j.size, j.base, j.dirty = int64(b.Len()), int64(b.Len()), false
	clear(j.pending)
	return nil
}

// trimCarried drops the counts that aged out by generation gen and, past
// journalMaxCarried, the oldest.
func (j *Journal) trimCarried(gen uint64) {
	aged := 0
	for tok, c := range j.crashes {
		if gen-min(c.gen, gen) > journalCarryGenerations {
			delete(j.crashes, tok)
			aged++
		}
	}
	if aged > 0 {
		j.log.Debug("attempt journal dropped crash counts of ids not seen again", "counts", aged)
	}
	over := len(j.crashes) - journalMaxCarried
	if over <= 0 {
		return
	}
	toks := make([]string, 0, len(j.crashes))
	for tok := range j.crashes {
		toks = append(toks, tok)
	}
	slices.SortFunc(toks, func(a, b string) int { // oldest, then smallest, first
		ca, cb := j.crashes[a], j.crashes[b]
		return cmp.Or(cmp.Compare(ca.gen, cb.gen), cmp.Compare(ca.n, cb.n), strings.Compare(a, b))
	})
	for _, tok := range toks[:over] {
		delete(j.crashes, tok)
	}
	j.log.Warn("attempt journal carries too many crash counts; the oldest were dropped", "dropped", over, "max", journalMaxCarried)
}

// removeTemps removes the temporary files a rewrite cut short left:
// <journal>.<random>.tmp (datadir.WriteFileAtomic's), and <journal>.tmp,
// the name older versions wrote through. os.Remove removes a link, never
// its target.
func (j *Journal) removeTemps() {
	ents, err := os.ReadDir(j.dir)
	if err != nil {
		return // NewJournal's next step names the problem
	}
	for _, de := range ents {
		name := de.Name()
		if name == journalFile+".tmp" || strings.HasPrefix(name, journalFile+".") && strings.HasSuffix(name, ".tmp") {
			if err := os.Remove(filepath.Join(j.dir, name)); err != nil {
				j.log.Warn("attempt journal: a temporary file not removed", "path", filepath.Join(j.dir, name), "err", err)
			}
		}
	}
}

// ID is the journal's id: random, kept in the file, so it lives as long
// as the crash counts it names. A process on a fresh data dir gets a new
// one. Crash reports (Fleet) are keyed by it: one journal's counts
// are cumulative, so the fleet keeps the largest it saw per journal and
// message, and a new journal's counts add to an old one's.
func (j *Journal) ID() string { return j.id }

// Recovered returns the crash counts the journal carried at open, by
// token (Token of the message id): what earlier processes on this
// journal died running, and the next crash report says.
func (j *Journal) Recovered() map[string]int {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make(map[string]int, len(j.crashes))
	for tok, c := range j.crashes {
		out[tok] = c.n
	}
	return out
}

// Crashes reports how many earlier attempts of message id ended with the
// process.
func (j *Journal) Crashes(id string) int {
	tok := Token(id)
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.crashes[tok].n
}

// Start records that the inference of these messages begins. It returns
// only after the record is written; on error (the disk refused it) the
// start is not recorded at all, so a crash during the run is not counted,
// and the journal warns (rate-limited) and reports itself failing.
func (j *Journal) Start(ids ...string) error {
	toks := tokens(ids)
	j.mu.Lock()
	defer j.mu.Unlock()
	offs, err := j.appendLocked('S', toks)
	for i, tok := range toks {
		off := int64(-1)
		if offs != nil {
			off = offs[i]
		}
		j.open[tok] = append(j.open[tok], off)
	}
	j.compactLocked()
	return err
}

// Done forgets the messages: their run ended, so a crash from now on is
// not theirs. A lost Done (the process died right after) overcounts one
// attempt at most. The end is marked over each start's line ('S' becomes
// 'D', no new space needed); where that fails, or no start line holds
// the id's carried count back, a 'D' line is appended, and where that
// fails too it is kept for the next write (see Journal).
func (j *Journal) Done(ids ...string) {
	toks := tokens(ids)
	j.mu.Lock()
	defer j.mu.Unlock()
	var appendEnds []string
	for _, tok := range toks {
		offs := j.open[tok]
		_, hadCarried := j.crashes[tok]
		delete(j.open, tok)
		delete(j.crashes, tok)
		recorded, marked := false, true
		for _, off := range offs {
			if off >= 0 {
				recorded = true
				marked = j.markDoneLocked(off) && marked
			}
		}
		// A start line marked 'D' follows the id's carried count ('C'
		// lines come first in a rewrite), so it forgets that count too.
		if recorded && !marked || !recorded && hadCarried {
			appendEnds = append(appendEnds, tok)
		}
	}
	if len(appendEnds) > 0 {
		if _, err := j.appendLocked('D', appendEnds); err != nil {
			j.keepPendingLocked(appendEnds)
		}
	}
	j.compactLocked()
}

// markDoneLocked turns the start line at off into an end line ('S' to
// 'D'): one byte over bytes the file holds. False: the write failed.
func (j *Journal) markDoneLocked(off int64) bool {
	if j.f == nil {
		return true // not this file's line: a rewrite wrote a new one
	}
	if _, err := j.w.WriteAt([]byte{'D'}, off); err != nil {
		_ = j.failedLocked(fmt.Errorf("crash: mark an end in journal %s: %w", j.path, err))
		return false
	}
	return true
}

// keepPendingLocked keeps the ends of toks for the next write, at most
// journalMaxPending in all.
func (j *Journal) keepPendingLocked(toks []string) {
	dropped := 0
	for _, tok := range toks {
		if len(j.pending) >= journalMaxPending {
			dropped++
			continue
		}
		j.pending[tok] = struct{}{}
	}
	if dropped > 0 {
		j.warn.Warn("attempt journal: ends of runs not kept for a disk that refuses every write; the next process may count them as crashes",
			"path", j.path, "dropped", dropped, "kept", len(j.pending))
	}
}

func tokens(ids []string) []string {
	toks := make([]string, len(ids))
	for i, id := range ids {
		toks[i] = Token(id)
	}
	return toks
}

// appendLocked writes the kept ends, then a line op <token> per token, at
// the end of the file's whole lines, and returns the offset of each
// token's line. When the disk refuses the write nothing of it stays: the
// file is cut back to its whole lines (or, if that fails too, before the
// next write). Memory only: nothing to write, nil offsets.
func (j *Journal) appendLocked(op byte, toks []string) ([]int64, error) {
	if j.dir == "" || len(toks) == 0 && len(j.pending) == 0 {
		return nil, nil
	}
	if j.f == nil { // the rewrite at open failed: try it again first
		if !j.probeDueLocked() {
			return nil, j.failedLocked(fmt.Errorf("crash: journal %s not written since a rewrite failed", j.path))
		}
		if err := j.rewrite(); err != nil {
			return nil, j.failedLocked(err)
		}
	}
	if err := j.cutLocked(); err != nil {
		return nil, j.failedLocked(err)
	}
	j.buf = j.buf[:0]
	for tok := range j.pending {
		j.buf = appendLine(j.buf, 'D', tok)
	}
	offs := make([]int64, len(toks))
	for i, tok := range toks {
		offs[i] = j.size + int64(len(j.buf))
		j.buf = appendLine(j.buf, op, tok)
	}
	if _, err := j.w.WriteAt(j.buf, j.size); err != nil {
		j.dirty = true
		_ = j.cutLocked()
		return nil, j.failedLocked(fmt.Errorf("crash: write journal %s: %w", j.path, err))
	}
	j.size += int64(len(j.buf))
	clear(j.pending)
	j.healedLocked()
	return offs, nil
}

func appendLine(b []byte, op byte, tok string) []byte {
	b = append(b, op, ' ')
	b = append(b, tok...)
	return append(b, '\n')
}

// cutLocked cuts the bytes a failed write may have left after the whole
// lines, when there may be some.
func (j *Journal) cutLocked() error {
	if !j.dirty {
		return nil
	}
	if err := j.f.Truncate(j.size); err != nil {
		return fmt.Errorf("crash: cut journal %s back to its whole lines: %w", j.path, err)
	}
	j.dirty = false
	return nil
}

// compactLocked rewrites the file once the appended lines outgrow it.
func (j *Journal) compactLocked() {
	if j.f == nil || j.size-j.base <= max(journalCompactBytes, j.base) {
		return
	}
	if err := j.rewrite(); err != nil {
		// The lines are written; the file stays the old one, retried
		// after as many bytes again.
		j.base = j.size
		_ = j.failedLocked(err)
	}
}

// failedLocked counts a write the disk refused, marks the journal failing
// and warns (rate-limited); it returns err.
func (j *Journal) failedLocked(err error) error {
	j.errs++
	j.failing = true
	j.lastProbe = j.now()
	j.warn.Warn(journalWarning, "path", j.path, "failed_writes", j.errs, "err", err)
	return err
}

// healedLocked: a write succeeded. A failing journal says it is written
// again, and the next failure warns at once.
func (j *Journal) healedLocked() {
	if !j.failing {
		return
	}
	j.failing = false
	j.warn.Reset(journalWarning)
	j.log.Info("attempt journal written again", "path", j.path, "failed_writes", j.errs)
}

// probeDueLocked reports whether a failing journal may try a write now,
// and if so notes that it does.
func (j *Journal) probeDueLocked() bool {
	now := j.now()
	if now.Sub(j.lastProbe) < j.probeEvery {
		return false
	}
	j.lastProbe = now
	return true
}

// probeLocked tries a write for a failing journal: the kept ends, the
// rewrite that failed at open, or else journalMaxLine bytes without a
// newline (a torn line, never read) after the whole lines, cut at once.
func (j *Journal) probeLocked() {
	if j.f == nil {
		if err := j.rewrite(); err != nil {
			_ = j.failedLocked(err)
			return
		}
		j.healedLocked()
		return
	}
	if len(j.pending) > 0 {
		_, _ = j.appendLocked(0, nil)
		return
	}
	if err := j.cutLocked(); err != nil {
		_ = j.failedLocked(err)
		return
	}
	probe := bytes.Repeat([]byte{'#'}, journalMaxLine)
	_, err := j.w.WriteAt(probe, j.size)
	j.dirty = true
	if cerr := j.cutLocked(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = j.failedLocked(fmt.Errorf("crash: probe journal %s: %w", j.path, err))
		return
	}
	j.healedLocked()
}

// Stats reports the journal's health. While it is failing and no write
// was tried for journalProbeEvery, it tries one first (see probeLocked),
// so a journal without tasks turns healthy once the disk has room.
func (j *Journal) Stats() JournalStats {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.failing && j.dir != "" && j.probeDueLocked() {
		j.probeLocked()
	}
	return JournalStats{WriteErrors: j.errs, Failing: j.failing}
}

// Close closes the file. Started ids stay recorded: the next process reads
// them as crashes unless they were settled.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	if len(j.pending) > 0 { // a last try at the kept ends
		_, _ = j.appendLocked(0, nil)
	}
	err := j.f.Close()
	j.f = nil
	return err
}
