// Package datadir holds a data directory for one process: inferq's result
// spool and attempt journal assume they are alone in theirs, so a second
// process on the same directory would overwrite the first one's spool files
// and delete its temporary files at start.
package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// LockFile is the file in the directory that holds the lock; it keeps the
// pid of the holder, for the error a second process gets.
const LockFile = "inferq.lock"

// ErrLocked is matched (errors.Is) by the error Acquire returns when
// another process holds the directory.
var ErrLocked = errors.New("datadir: locked by another process")

// LockedError is Acquire's error when another process holds the directory.
type LockedError struct {
	Dir string
	PID int // the holder's, 0 when the lock file does not say
}

func (e *LockedError) Error() string {
	holder := "another process"
	if e.PID > 0 {
		holder = "process " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("datadir: %s is in use by %s (lock %s); give each inferq process its own data_dir",
		e.Dir, holder, filepath.Join(e.Dir, LockFile))
}

// Is makes errors.Is(err, ErrLocked) hold.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// Lock is an exclusive hold on a data directory, from Acquire until
// Release (or the end of the process: the kernel drops the lock with the
// file, so a killed process leaves no stale lock). Not safe for concurrent
// Release calls.
type Lock struct {
	dir string
	f   *os.File
}

// Acquire creates dir if needed (DirMode) and takes its lock without
// waiting: when another process (or another Lock in this one) holds it,
// the error is a *LockedError naming dir and, if the lock file says, the
// holder's pid. It first refuses dir, or a directory directly in it, that
// group or others may write or another user owns, and a symlink directly
// in it (CheckDir); the lock file is opened with OpenFile (never through a
// symlink) and kept FileMode.
func Acquire(dir string) (*Lock, error) {
	if err := os.MkdirAll(dir, DirMode); err != nil {
		return nil, fmt.Errorf("datadir: %w", err)
	}
	if err := checkTree(dir); err != nil {
		return nil, err
	}
	f, err := OpenFile(dir, LockFile, os.O_RDWR|os.O_CREATE)
	if err != nil {
		return nil, err // names the lock file
	}
	if fi, err := f.Stat(); err == nil && fi.Mode().Perm() != FileMode {
		_ = f.Chmod(FileMode) // created 0644 by an older version
	}
	busy, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("datadir: lock %s: %w", dir, err)
	}
	if busy {
		pid := readPID(f)
		f.Close()
		return nil, &LockedError{Dir: dir, PID: pid}
	}
	// The pid is for the error above, a courtesy: the lock is the flock.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{dir: dir, f: f}, nil
}

// readPID reads the holder's pid from the lock file; 0 when it does not
// hold one.
func readPID(f *os.File) int {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// Dir is the directory held.
func (l *Lock) Dir() string { return l.dir }

// Release gives the directory up. The lock file stays: removing it would
// let a process that opened it just before lock a file no longer in the
// directory while a third one creates a new one.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	_ = l.f.Truncate(0)
	err := l.f.Close() // closing drops the flock
	l.f = nil
	if err != nil {
		return fmt.Errorf("datadir: release %s: %w", l.dir, err)
	}
	return nil
}
