//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package broker

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes an exclusive lock on dir's LOCK file, so that two brokers
// never write one data dir; the lock goes with the process.
func lockDir(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("broker: create data dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("broker: open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("broker: data dir %s is in use by another broker: %w", dir, err)
	}
	return func() { f.Close() }, nil
}
