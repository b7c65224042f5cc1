// Package faultinject wraps a model's runner with the faults the tests and
// the chaos harness ask for through the environment, in a binary built with
// -tags faultinject only: INFERQ_FAULT_CRASH_ON kills the process in a
// batch, INFERQ_FAULT_RUN_DELAY slows every batch. In the normal binary Hook
// is the identity.
package faultinject
