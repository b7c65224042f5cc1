//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package datadir

import (
	"errors"
	"io/fs"
	"syscall"
)

// oNoFollow makes open fail on a symlink (ELOOP).
const oNoFollow = syscall.O_NOFOLLOW

func isLoop(err error) bool { return errors.Is(err, syscall.ELOOP) }

// links is fi's hard link count.
func links(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}

// owner is fi's owner's uid.
func owner(fi fs.FileInfo) (int, bool) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid), true
	}
	return 0, false
}
