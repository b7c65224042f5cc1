//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package datadir

import "io/fs"

// Where there is no O_NOFOLLOW, link count or owner to read, OpenFile and
// CheckDir check the mode and the file type only. Acquire is refused
// there anyway (flock_other.go).
const oNoFollow = 0

func isLoop(error) bool { return false }

func links(fs.FileInfo) uint64 { return 1 }

func owner(fs.FileInfo) (int, bool) { return 0, false }
