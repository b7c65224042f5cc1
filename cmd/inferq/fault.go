package main

import (
	"github.com/inferq/inferq/faultinject"
	"github.com/inferq/inferq/runtime"
)

// faultHook wraps serve's runners with the faults of a -tags faultinject
// binary (package faultinject); the identity in the normal binary.
func faultHook(getenv func(string) string) func(runtime.Runner) runtime.Runner {
	return faultinject.Hook(getenv)
}
