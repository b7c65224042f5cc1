//go:build !faultinject

package faultinject

import "github.com/inferq/inferq/batch"

// Hook is the identity in the normal binary: the fault switch exists only
// in a binary built with -tags faultinject (see on.go).
func Hook(getenv func(string) string) func(batch.Runner) batch.Runner {
	return func(r batch.Runner) batch.Runner { return r }
}
