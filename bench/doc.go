// Package bench measures inferq's throughput and latency per model and
// device, next to the ceilings it is measured against, all in one run on
// one machine: the runtime alone behind the batcher (direct), the broker
// with a zero-work worker (broker), the full path through an in-process
// inferq server (queue), sync queries (query) and the Python adapter's
// one-task-at-a-time pattern (adapter).
//
// Run drives the closed-loop load (load.go), verifies every result
// (modes.go), samples the process's CPU and RSS from /proc (stats.go) and
// writes the table, the JSON file and the plot (report.go). The in-process
// servers are built by package worker, as `inferq serve` builds its own,
// so the bench measures what serve runs. The package reads no environment
// and holds no state: everything comes in through Config.
package bench
