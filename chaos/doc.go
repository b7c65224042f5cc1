// Package chaos is inferq's chaos harness (`make chaos`, issue 11): it runs
// the real inferq binary as an operator would, against the embedded broker
// (an `inferq broker` subprocess) or a real KubeMQ (KUBEMQ_ADDRESS), and
// does to it what production does: kill -9, SIGTERM and broker outages
// mid-load, a result store that stops answering, slow HTTP clients,
// floods of hostile bodies and ids interleaved with valid tasks, and a
// fleet of three replicas on one queue with one killed and restarted every
// few seconds and one scaled down (issue 12 item 5; it runs the
// -tags faultinject build, whose INFERQ_FAULT_RUN_DELAY makes each batch
// slow enough for a kill to land mid-inference). Each
// scenario accounts for every task it sent (succeeded, failed,
// unprocessable, dead-lettered, lost, stored twice, deliveries per task)
// and fails on any loss or redelivery loop; a task stored twice is a
// duplicate, counted and reported (at-least-once delivery), a failure
// only where a scenario promises exactly once.
//
// The package holds tests only: `go test ./chaos` runs the short form
// (seconds per scenario, part of `make test`); `make chaos` runs the full
// form (`-args -chaos.full`). See chaos_test.go for the flags and the
// "make chaos" section of docs/benchmarks-and-chaos.md for what each
// scenario does.
package chaos
