//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package datadir

import (
	"errors"
	"os"
)

// tryLock is not available here: a data_dir cannot be held, so it is
// refused rather than shared unguarded.
func tryLock(*os.File) (bool, error) {
	return false, errors.New("locking a data directory is not supported on this platform")
}
