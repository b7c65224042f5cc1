package datadir_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/inferq/inferq/datadir"
)

// A pre-placed inferq.lock symlink is not followed: Acquire refuses the
// directory and the link's target keeps its content (it was truncated and
// given a pid, issue 27 item 3).
func TestAcquireDoesNotFollowLockSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(target, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, datadir.LockFile)); err != nil {
		t.Fatal(err)
	}
	l, err := datadir.Acquire(dir)
	if err == nil {
		_ = l.Release()
		t.Fatal("Acquire followed the lock file's symlink")
	}
	if !strings.Contains(err.Error(), datadir.LockFile) || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("error %q does not say the lock file is a symbolic link", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "precious\n" {
		t.Errorf("the link's target now holds %q", b)
	}
}

// Acquire creates the directory 0700 and the lock file 0600, and narrows
// a lock file an older version created 0644.
func TestAcquireCreatesPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	l, err := datadir.Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkMode(t, dir, 0o700)
	checkMode(t, filepath.Join(dir, datadir.LockFile), 0o600)
	_ = l.Release()

	old := t.TempDir()
	if err := os.WriteFile(filepath.Join(old, datadir.LockFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	l, err = datadir.Acquire(old)
	if err != nil {
		t.Fatal(err)
	}
	checkMode(t, filepath.Join(old, datadir.LockFile), 0o600)
	_ = l.Release()
}

// A data directory, or a subdirectory of it, that group or others may
// write is refused with the path and the mode named, as ssh and
// PostgreSQL refuse theirs; so is a subdirectory that is a symlink.
func TestAcquireRefusesWritableByOthers(t *testing.T) {
	for _, mode := range []os.FileMode{0o777, 0o770, 0o703, 0o1777} {
		dir := filepath.Join(t.TempDir(), "data")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		chmod(t, dir, mode)
		_, err := datadir.Acquire(dir)
		if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "writable by group or others") ||
			!strings.Contains(err.Error(), fmt.Sprintf("%#o", mode.Perm())) {
			t.Errorf("mode %#o: %v, want an error naming %s and the mode", mode, err, dir)
		}
	}

	dir := t.TempDir()
	sub := filepath.Join(dir, "results")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	chmod(t, sub, 0o777)
	if _, err := datadir.Acquire(dir); err == nil || !strings.Contains(err.Error(), sub) || !strings.Contains(err.Error(), "0777") {
		t.Errorf("results/ of mode 0777: %v, want an error naming it and its mode", err)
	}
	chmod(t, sub, 0o700)
	if err := os.Symlink(t.TempDir(), filepath.Join(dir, "journal")); err != nil {
		t.Fatal(err)
	}
	if _, err := datadir.Acquire(dir); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "journal")) || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("a journal/ symlink: %v, want an error naming it", err)
	}
}

// A directory another user owns is refused: that user could replace the
// files in it.
func TestAcquireRefusesOtherOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory away")
	}
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 12345, 12345); err != nil {
		t.Fatal(err)
	}
	if _, err := datadir.Acquire(dir); err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "uid 12345") {
		t.Errorf("a directory of uid 12345: %v, want an error naming it and its owner", err)
	}
}

// OpenFile is the one way to open a file in a data directory: it never
// follows a symlink, creates 0600, and refuses what is not a regular file
// with one link (a hard link's other name, a named pipe) before it
// truncates anything.
func TestOpenFile(t *testing.T) {
	dir := t.TempDir()
	f, err := datadir.OpenFile(dir, "a", os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("a")
	_ = f.Close()
	checkMode(t, filepath.Join(dir, "a"), 0o600)

	target := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(target, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(target, filepath.Join(dir, "hard")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, flag := range map[string]int{
		"link": os.O_WRONLY | os.O_CREATE | os.O_TRUNC, "hard": os.O_WRONLY | os.O_CREATE | os.O_TRUNC,
		"fifo": os.O_RDONLY, "../escape": os.O_RDONLY, "": os.O_RDONLY,
	} {
		f, err := datadir.OpenFile(dir, name, flag)
		if err == nil {
			_ = f.Close()
			t.Errorf("OpenFile(%q) succeeded", name)
		} else if name != "" && !strings.Contains(err.Error(), name) {
			t.Errorf("OpenFile(%q): %v does not name the file", name, err)
		}
	}
	if b, _ := os.ReadFile(target); string(b) != "precious\n" {
		t.Errorf("a link's target now holds %q", b)
	}
}

// WriteFileAtomic replaces a file whole (a new 0600 file renamed over the
// name, which replaces a symlink there instead of writing through it) and
// leaves no temporary file, also when the write fails.
func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(target, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "j")); err != nil {
		t.Fatal(err)
	}
	write := func(s string) func(io.Writer) error {
		return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
	}
	if err := datadir.WriteFileAtomic(dir, "j", write("new\n")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "j")); string(b) != "new\n" {
		t.Errorf("j holds %q", b)
	}
	if b, _ := os.ReadFile(target); string(b) != "precious\n" {
		t.Errorf("the old link's target now holds %q", b)
	}
	checkMode(t, filepath.Join(dir, "j"), 0o600)
	boom := errors.New("boom")
	if err := datadir.WriteFileAtomic(dir, "j", func(io.Writer) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("failed write: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "j")); string(b) != "new\n" {
		t.Errorf("a failed write changed j: %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("dir holds %v, want j alone", ents)
	}
	if b, err := datadir.ReadFile(dir, "j"); err != nil || string(b) != "new\n" {
		t.Errorf("ReadFile: %q, %v", b, err)
	}
}

// MkdirAll creates a directory 0700 and refuses an existing one that
// group or others may write.
func TestMkdirAll(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "results")
	if err := datadir.MkdirAll(dir); err != nil {
		t.Fatal(err)
	}
	checkMode(t, dir, 0o700)
	chmod(t, dir, 0o777)
	if err := datadir.MkdirAll(dir); err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "0777") {
		t.Errorf("MkdirAll of a 0777 directory: %v", err)
	}
}

func checkMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("%s has mode %#o, want %#o", path, got, want)
	}
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	m := mode.Perm()
	if mode&0o1000 != 0 {
		m |= os.ModeSticky
	}
	if err := os.Chmod(path, m); err != nil {
		t.Fatal(err)
	}
}
