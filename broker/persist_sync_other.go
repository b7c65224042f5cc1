//go:build !linux

package broker

import (
	"os"
	"time"
)

// fdatasync is fsync where Linux's fdatasync is not at hand.
func fdatasync(f *os.File) error { return f.Sync() }

// pause sleeps about walGatherPause.
func pause() { time.Sleep(walGatherPause) }
