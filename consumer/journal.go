package consumer

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
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
// Safe for concurrent use.
type Journal struct {
	mu      sync.Mutex
	f       *os.File // nil: memory only
	path    string
	buf     []byte
	open    map[string]int // id -> crashes recorded before this process, +1 while started here
	crashes map[string]int // crashes recorded by earlier processes
	lines   int
}

// journalCompactLines triggers a rewrite of the file with the open ids only.
const journalCompactLines = 1 << 20

// OpenJournal opens (or creates) the journal in dir; dir "" keeps it in
// memory.
func OpenJournal(dir string) (*Journal, error) {
	j := &Journal{open: map[string]int{}, crashes: map[string]int{}}
	if dir == "" {
		return j, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("consumer: journal dir: %w", err)
	}
	j.path = filepath.Join(dir, "attempts.journal")
	if err := j.load(); err != nil {
		return nil, err
	}
	if err := j.rewrite(); err != nil {
		return nil, err
	}
	return j, nil
}

// load reads the file: "S id" starts, "D id" settles, "C id n" carried
// crash counts from a compaction.
func (j *Journal) load() error {
	data, err := os.ReadFile(j.path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("consumer: read journal: %w", err)
	}
	started := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) < 3 || line[1] != ' ' {
			continue // a torn last line
		}
		rest := string(line[2:])
		switch line[0] {
		case 'S':
			started[rest]++
		case 'D':
			delete(started, rest)
			delete(j.crashes, rest)
		case 'C':
			var id string
			var n int
			if _, err := fmt.Sscanf(rest, "%s %d", &id, &n); err == nil && n > 0 {
				j.crashes[id] = n
			}
		}
	}
	for id, n := range started {
		j.crashes[id] += n
	}
	return nil
}

// rewrite replaces the file with the crash counts alone.
func (j *Journal) rewrite() error {
	tmp := j.path + ".tmp"
	var b bytes.Buffer
	for id, n := range j.crashes {
		fmt.Fprintf(&b, "C %s %d\n", id, n)
	}
	for id := range j.open {
		fmt.Fprintf(&b, "S %s\n", id)
	}
	if err := os.WriteFile(tmp, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("consumer: write journal: %w", err)
	}
	if err := os.Rename(tmp, j.path); err != nil {
		return fmt.Errorf("consumer: replace journal: %w", err)
	}
	if j.f != nil {
		j.f.Close()
	}
	f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("consumer: open journal: %w", err)
	}
	j.f, j.lines = f, len(j.crashes)+len(j.open)
	return nil
}

// Crashes reports how many earlier attempts of message id ended with the
// process.
func (j *Journal) Crashes(id string) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.crashes[id]
}

// Start records that the inference of these messages begins. It returns
// only after the record is written.
func (j *Journal) Start(ids ...string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, id := range ids {
		j.open[id]++
	}
	return j.appendLocked('S', ids)
}

// Done forgets the messages: their run ended, so a crash from now on is
// not theirs. A lost Done (the process died right after) overcounts one
// attempt at most.
func (j *Journal) Done(ids ...string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, id := range ids {
		delete(j.open, id)
		delete(j.crashes, id)
	}
	_ = j.appendLocked('D', ids)
}

func (j *Journal) appendLocked(op byte, ids []string) error {
	if j.f == nil || len(ids) == 0 {
		return nil
	}
	j.buf = j.buf[:0]
	for _, id := range ids {
		j.buf = append(j.buf, op, ' ')
		j.buf = append(j.buf, id...)
		j.buf = append(j.buf, '\n')
	}
	if _, err := j.f.Write(j.buf); err != nil {
		return fmt.Errorf("consumer: journal write: %w", err)
	}
	j.lines += len(ids)
	if j.lines > journalCompactLines {
		return j.rewrite()
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
