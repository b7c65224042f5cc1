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

	"github.com/inferq/inferq/datadir"
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
// Safe for concurrent use.
type Journal struct {
	mu      sync.Mutex
	log     *slog.Logger
	f       *os.File // nil: memory only
	dir     string   // the journal's directory; "": memory only
	path    string   // dir/journalFile, for errors and logs
	buf     []byte
	open    map[string]int     // token -> starts in this process not yet done
	crashes map[string]carried // token -> crashes recorded by earlier processes
	gen     uint64             // rewrites of the file so far: the age of a carried count
	id      string             // this journal's id (journalIDLen hex digits): names its crash reports
	size    int64              // bytes in the file
	base    int64              // bytes in the file after its last rewrite
}

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
)

// newJournalID returns a fresh random journal id.
func newJournalID() string {
	var b [journalIDLen / 2]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// isJournalID reports whether s is a journal id: journalIDLen lowercase
// hex digits.
func isJournalID(s string) bool {
	if len(s) != journalIDLen {
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
	// lines, dropped counts); nil discards them.
	Logger *slog.Logger
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
// trusted. A file from a newer format is refused and left as it is.
func NewJournal(cfg JournalConfig) (*Journal, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	j := &Journal{log: cfg.Logger, open: map[string]int{}, crashes: map[string]carried{}}
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
		return nil, err
	}
	return j, nil
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
func (j *Journal) rewrite() error {
	j.gen++
	j.trimCarried()
	var b bytes.Buffer
	b.WriteString(journalHeader(j.gen))
	fmt.Fprintf(&b, "J %s\n", j.id)
	for tok, c := range j.crashes {
		fmt.Fprintf(&b, "C %s %d %d\n", tok, c.n, c.gen)
	}
	for tok, n := range j.open {
		for range n {
			fmt.Fprintf(&b, "S %s\n", tok)
		}
	}
	err := datadir.WriteFileAtomic(j.dir, journalFile, func(w io.Writer) error {
		_, err := w.Write(b.Bytes())
		return err
	})
	if err != nil {
		return fmt.Errorf("crash: rewrite journal: %w", err) // names the file
	}
	f, err := datadir.OpenFile(j.dir, journalFile, os.O_WRONLY|os.O_APPEND)
	if err != nil {
		return fmt.Errorf("crash: open journal: %w", err)
	}
	if j.f != nil {
		_ = j.f.Close()
	}
	j.f, j.size, j.base = f, int64(b.Len()), int64(b.Len())
	return nil
}

// trimCarried drops the counts that aged out and, past
// journalMaxCarried, the oldest.
func (j *Journal) trimCarried() {
	aged := 0
	for tok, c := range j.crashes {
		if j.gen-min(c.gen, j.gen) > journalCarryGenerations {
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
// only after the record is written.
func (j *Journal) Start(ids ...string) error {
	toks := tokens(ids)
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, tok := range toks {
		j.open[tok]++
	}
	return j.appendLocked('S', toks)
}

// Done forgets the messages: their run ended, so a crash from now on is
// not theirs. A lost Done (the process died right after) overcounts one
// attempt at most.
func (j *Journal) Done(ids ...string) {
	toks := tokens(ids)
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, tok := range toks {
		delete(j.open, tok)
		delete(j.crashes, tok)
	}
	_ = j.appendLocked('D', toks)
}

func tokens(ids []string) []string {
	toks := make([]string, len(ids))
	for i, id := range ids {
		toks[i] = Token(id)
	}
	return toks
}

func (j *Journal) appendLocked(op byte, toks []string) error {
	if j.f == nil || len(toks) == 0 {
		return nil
	}
	j.buf = j.buf[:0]
	for _, tok := range toks {
		j.buf = append(j.buf, op, ' ')
		j.buf = append(j.buf, tok...)
		j.buf = append(j.buf, '\n')
	}
	if _, err := j.f.Write(j.buf); err != nil {
		return fmt.Errorf("crash: journal write: %w", err)
	}
	j.size += int64(len(j.buf))
	if j.size-j.base > max(journalCompactBytes, j.base) {
		if err := j.rewrite(); err != nil {
			// The lines are written; the file stays the old one, retried
			// after as many bytes again.
			j.base = j.size
			j.log.Error("attempt journal compaction failed", "err", err)
		}
	}
	return nil
}

// Close closes the file. Started ids stay recorded: the next process reads
// them as crashes unless they were settled.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}
