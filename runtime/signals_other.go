//go:build !linux

package runtime

import "log/slog"

// withSignalHandlersKept runs fn. Only Linux builds save and restore signal
// actions around loading the CUDA provider, the only platform it ships for.
func withSignalHandlersKept(_ *slog.Logger, fn func() error) error {
	ortProcess.signals.Lock()
	defer ortProcess.signals.Unlock()
	return fn()
}
