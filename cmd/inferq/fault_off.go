//go:build !faultinject

package main

import "github.com/inferq/inferq/batch"

// faultHook is the identity in the normal binary: the fault switch exists
// only in a binary built with -tags faultinject (see fault_on.go).
func faultHook(getenv func(string) string) func(batch.Runner) batch.Runner {
	return func(r batch.Runner) batch.Runner { return r }
}
