//go:build !faultinject

package main

import "github.com/inferq/inferq/runtime"

// faultHook is the identity in the normal binary: the fault switch exists
// only in a binary built with -tags faultinject (see fault_on.go).
func faultHook(getenv func(string) string) func(runtime.Runner) runtime.Runner {
	return func(r runtime.Runner) runtime.Runner { return r }
}
