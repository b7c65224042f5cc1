// Package chaos is inferq's chaos harness (`make chaos`, issue 11): it runs
// the real inferq binary as an operator would, against the embedded broker
// (an `inferq broker` subprocess) or a real KubeMQ (KUBEMQ_ADDRESS), and
// does to it what production does: kill -9, SIGTERM and broker outages
// mid-load, a result store that stops answering, slow HTTP clients, and
// floods of hostile bodies and ids interleaved with valid tasks. Each
// scenario accounts for every task it sent (succeeded, failed,
// unprocessable, dead-lettered, lost, stored twice, deliveries per task)
// and fails on any loss or redelivery loop.
//
// The package holds tests only: `go test ./chaos` runs the short form
// (seconds per scenario, part of `make test`); `make chaos` runs the full
// form (`-args -chaos.full`). See chaos_test.go for the flags and the
// README's "Chaos" section for what each scenario does.
package chaos
