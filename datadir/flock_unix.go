//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package datadir

import (
	"errors"
	"os"
	"syscall"
)

// tryLock takes flock(2)'s exclusive lock on f without blocking; busy
// reports that another open file holds it.
func tryLock(f *os.File) (busy bool, err error) {
	for range 100 { // EINTR: retried, a bounded number of times
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, nil
	}
	return false, err
}
