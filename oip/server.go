package oip

import (
	"context"
	"time"

	"github.com/inferq/inferq/admit"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
)

// What the front ends need of the server behind them, declared here, on
// the side that uses it: *consumer.Server satisfies Server[*consumer.Model],
// *consumer.Metrics satisfies Observer. Each interface is what one kind of
// route needs: the model routes a Catalog, infer an Inferer as well, the
// health and task routes Health and Records.

// Model is a served model as the front ends show it: admission's view (its
// configuration and tensors) and the version that serves it now.
// *consumer.Model satisfies it.
type Model interface {
	admit.Model
	// Serving is the version that takes the model's requests now (a model
	// repository switches versions while serving). Safe for concurrent
	// use.
	Serving() string
}

// Catalog is the models served now. Its methods are safe for concurrent
// use; models come and go while it serves.
type Catalog[M Model] interface {
	// Model returns the model called name, or the error that says this
	// server does not serve it, which the front ends answer with as it is
	// (404, NOT_FOUND).
	Model(name string) (M, error)
	// Models returns the models served now, in the order added. The
	// caller must not change the slice.
	Models() []M
}

// Reply encodes the answer to an infer request that ran: the model version
// that ran it, its outputs, and the request as admission read it (the
// outputs it asked for, their form, its id). An error fails the request.
type Reply = func(version string, outputs []tensor.Tensor, t *task.Task) error

// Inferer runs infer requests.
type Inferer interface {
	// Infer admits in, an infer request (From admit.FromHTTP; Model names
	// the model; Body, or Decoded or DecodeErr with Size; Trace carries
	// the caller's trace context), against the models served now and runs
	// it through its model's batcher ahead of queued tasks, waiting for
	// its result or for ctx (or its deadline) to end. When it ran, reply
	// encodes the answer before Infer returns. Infer returns admission's
	// verdict, the outcome label of the metrics (success, or why not) and,
	// unless it succeeded, the error to answer with. Safe for concurrent
	// use.
	Infer(ctx context.Context, in admit.Input, reply Reply) (admit.Verdict, string, error)
}

// Health is the server's readiness beyond the models being warm. Its
// methods are cheap and safe for concurrent use.
type Health interface {
	// BrokerAnswers reports whether every queue's poller hears from the
	// broker.
	BrokerAnswers() bool
	// StoreFull reports whether the result store can take no more
	// records.
	StoreFull() bool
	// JournalFailing reports whether the attempt journal's last write
	// failed (a full data dir): tasks run, but a crash may go uncounted.
	JournalFailing() bool
}

// Records finds the stored result record of a task (/v1/tasks/{id}).
type Records interface {
	// Record returns the record stored for taskID, and whether there is
	// one. Safe for concurrent use.
	Record(taskID string) ([]byte, bool)
}

// Inference is what the gRPC endpoint needs: the models and inference.
type Inference[M Model] interface {
	Catalog[M]
	Inferer
}

// Server is what the HTTP endpoints need: the models, inference, health
// and task records.
type Server[M Model] interface {
	Inference[M]
	Health
	Records
}

// Observer counts the front ends' infer requests in the metrics.
// *consumer.Metrics satisfies it.
type Observer interface {
	// ObserveInfer counts one infer request, via "http" or "grpc", of
	// model ("" when it names none) with its outcome label, answered d
	// after it arrived. Safe for concurrent use.
	ObserveInfer(via, model, outcome string, d time.Duration)
}

// noObserver counts nothing: the front ends' Observer when none is given.
type noObserver struct{}

func (noObserver) ObserveInfer(string, string, string, time.Duration) {}

// The outcome labels of the metrics (consumer's Outcome constants; the
// values are the contract of inferq's metrics, see docs/operating.md) that
// the front ends report themselves or map to a status. The consumer owns
// them; a test keeps these equal to its.
const (
	outcomeBadInput     = "bad_input"
	outcomeExpired      = "expired"
	outcomeUnknownModel = "unknown_model"
	outcomeQueueFull    = "queue_full"
	outcomeQueueTimeout = "queue_timeout"
)

// unavailable reports whether a request was refused for its model's load
// (batching.max_queue_size, default_queue_timeout): the caller may retry
// later (503 with Retry-After, UNAVAILABLE).
func unavailable(outcome string) bool {
	return outcome == outcomeQueueFull || outcome == outcomeQueueTimeout
}
