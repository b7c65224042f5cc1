//go:build !faultinject

package faultinject

import "github.com/inferq/inferq/runtime"

// Hook is the identity in the normal binary: the fault switch exists only
// in a binary built with -tags faultinject (see on.go).
func Hook(getenv func(string) string) func(runtime.Runner) runtime.Runner {
	return func(r runtime.Runner) runtime.Runner { return r }
}
