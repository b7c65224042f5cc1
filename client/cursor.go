package client

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// readCursor reads a cursor file: one decimal sequence. A missing or empty
// file is no cursor (ok false); anything else unreadable is an error, so
// that a damaged file is not silently taken for "new records only".
func readCursor(path string) (seq uint64, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("client: read cursor: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return 0, false, nil
	}
	seq, err = strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("client: cursor file %s: %q is not a sequence number", path, s)
	}
	return seq, true, nil
}

// writeCursor replaces the cursor file atomically (temporary file, sync,
// rename), so a crash leaves the old value or the new one.
func writeCursor(path string, seq uint64) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("client: write cursor: %w", err)
	}
	_, err = f.WriteString(strconv.FormatUint(seq, 10) + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("client: write cursor: %w", err)
	}
	return nil
}
