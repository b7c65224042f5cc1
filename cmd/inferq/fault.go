package main

import (
	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/faultinject"
)

// faultHook wraps serve's runners with the faults of a -tags faultinject
// binary (package faultinject); the identity in the normal binary.
func faultHook(getenv func(string) string) func(batch.Runner) batch.Runner {
	return faultinject.Hook(getenv)
}
