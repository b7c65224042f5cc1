package datadir

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Files in a data directory. A data directory holds what inferq keeps
// across restarts (the result spool, the attempt journal); a file there
// that is a symlink or a hard link to something else would make inferq
// write through it (a pre-placed inferq.lock symlink had its target
// truncated and given a pid). So every file in one is opened here:
//
//   - OpenFile never follows a symlink (O_NOFOLLOW), creates files 0600,
//     and refuses anything but a regular file (a named pipe, a device) and,
//     for writing, a file with another link, before it truncates;
//   - WriteFileAtomic replaces a file whole through a new temporary file
//     (O_EXCL, 0600) renamed over it, which replaces a symlink instead of
//     writing through it;
//   - ReadFile reads one with OpenFile;
//   - MkdirAll creates directories 0700, and CheckDir refuses one that
//     group or others may write or another user owns, as ssh and
//     PostgreSQL refuse theirs.
//
// Acquire checks the data directory and its subdirectories the same way.
// Names are plain file names (no separator): a file is named by its
// directory and its name, so that no path of the caller's making can
// leave the directory.

// DirMode and FileMode are what the package creates.
const (
	DirMode  os.FileMode = 0o700
	FileMode os.FileMode = 0o600
)

// OpenFile opens the file name in dir with flag (os.O_RDONLY, os.O_WRONLY,
// os.O_CREATE, os.O_TRUNC, ...): without following a symlink, creating it
// FileMode, and only when it is a regular file (with one link, when it is
// opened for writing). O_TRUNC takes effect after those checks. Errors
// name the file.
func OpenFile(dir, name string, flag int) (*os.File, error) {
	path, err := join(dir, name)
	if err != nil {
		return nil, err
	}
	trunc := flag&os.O_TRUNC != 0
	// O_NONBLOCK: opening a named pipe does not wait for its other end
	// (the file is refused below); it changes nothing for a regular file.
	f, err := os.OpenFile(path, flag&^os.O_TRUNC|oNoFollow|syscall.O_NONBLOCK|syscall.O_CLOEXEC, FileMode)
	if err != nil {
		if isLoop(err) {
			return nil, fmt.Errorf("datadir: %s is a symbolic link; files in a data directory are not followed through links", path)
		}
		return nil, fmt.Errorf("datadir: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("datadir: %w", err)
	}
	write := flag&(os.O_WRONLY|os.O_RDWR) != 0
	switch {
	case !fi.Mode().IsRegular():
		err = fmt.Errorf("datadir: %s is not a regular file (mode %s)", path, fi.Mode())
	case write && links(fi) > 1:
		err = fmt.Errorf("datadir: %s has %d links; a file in a data directory has one (another name could be written through it)", path, links(fi))
	case trunc:
		if err = f.Truncate(0); err != nil {
			err = fmt.Errorf("datadir: truncate %s: %w", path, err)
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// ReadFile reads the file name in dir, opened with OpenFile.
func ReadFile(dir, name string) ([]byte, error) {
	f, err := OpenFile(dir, name, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("datadir: read %s: %w", f.Name(), err)
	}
	return b, nil
}

// WriteFileAtomic replaces the file name in dir with what write writes: a
// new temporary file in dir (<name>.<random>.tmp, created O_EXCL with
// FileMode), synced, renamed over name, and the directory synced; a crash
// leaves the old file or the new one whole. On error the temporary file is
// removed and name is unchanged; write's error is wrapped.
func WriteFileAtomic(dir, name string, write func(w io.Writer) error) error {
	path, err := join(dir, name)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, name+".*.tmp") // O_EXCL: never an existing file or link
	if err != nil {
		return fmt.Errorf("datadir: create a temporary file for %s: %w", path, err)
	}
	tmp := f.Name()
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = SyncDir(dir)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("datadir: write %s: %w", path, err)
	}
	return nil
}

// SyncDir fsyncs the directory dir, so that a file created, renamed or
// removed in it stays so after a crash.
func SyncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

// MkdirAll creates dir and its missing parents with DirMode, then checks
// dir with CheckDir (an existing one keeps its mode: one group or others
// may write is refused, not changed).
func MkdirAll(dir string) error {
	if err := os.MkdirAll(dir, DirMode); err != nil {
		return fmt.Errorf("datadir: %w", err)
	}
	return CheckDir(dir)
}

// CheckDir refuses dir when it is not a directory, when group or others
// may write it, or when a user other than this process's (or root) owns
// it: either could replace the files in it. The error names dir, its mode
// and what to do.
func CheckDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("datadir: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("datadir: %s is not a directory", dir)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("datadir: %s is writable by group or others (mode %#o); inferq refuses it, as ssh and PostgreSQL do: "+
			"chmod go-w %s, or give data_dir a directory inferq creates itself (0700), such as a subdirectory of a volume mounted with fsGroup, which is group-writable",
			dir, perm, dir)
	}
	if uid, ok := owner(fi); ok && uid != 0 && uid != os.Geteuid() {
		return fmt.Errorf("datadir: %s is owned by uid %d, not by this process's uid %d (or root): its owner could replace the files in it", dir, uid, os.Geteuid())
	}
	return nil
}

// checkTree checks dir and each directory directly in it with CheckDir,
// and refuses a symlink there: nothing in a data directory leads out of
// it.
func checkTree(dir string) error {
	if err := CheckDir(dir); err != nil {
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("datadir: %w", err)
	}
	for _, de := range ents {
		p := filepath.Join(dir, de.Name())
		switch {
		case de.Type()&fs.ModeSymlink != 0:
			return fmt.Errorf("datadir: %s is a symbolic link; a data directory holds no links (inferq does not follow them): remove it", p)
		case de.IsDir():
			if err := CheckDir(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// join is dir/name for a plain file name.
func join(dir, name string) (string, error) {
	if name == "" || name == "." || name == ".." || filepath.Base(name) != name || filepath.IsAbs(name) {
		return "", fmt.Errorf("datadir: %q is not a plain file name", name)
	}
	return filepath.Join(dir, name), nil
}
