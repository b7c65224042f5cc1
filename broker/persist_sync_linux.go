package broker

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data and what reading it back needs (its size when
// it grew), not its times.
func fdatasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			if serr = syscall.Fdatasync(int(fd)); serr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: serr}
	}
	return nil
}

// pause sleeps walGatherPause (a nanosleep: time.Sleep rounds sub
// millisecond sleeps up to a millisecond on an idle process).
func pause() {
	ts := syscall.NsecToTimespec(int64(walGatherPause))
	_ = syscall.Nanosleep(&ts, nil)
}
