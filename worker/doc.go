// Package worker assembles one inferq worker from its parts: it opens and
// warms a model's sessions on the devices placement chose, builds the
// dynamic batchers, and runs the consumer, the result store and the HTTP
// handler over one broker connection until the context ends, then drains
// and flushes them in order. `inferq serve` and `inferq bench` (its queue,
// query and adapter modes) both build their servers here, so what the bench
// measures is what serve runs.
//
// The package reads no environment: the tracing setup takes a getenv
// function (the OTLP exporters of the OpenTelemetry SDK read their OTEL_*
// settings themselves). It holds no state; every function is safe for
// concurrent use, and a Worker is run once.
package worker
