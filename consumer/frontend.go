package consumer

import (
	"context"
	"time"

	"github.com/inferq/inferq/admit"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
)

// What the Open Inference Protocol front ends (package oip, over HTTP and
// gRPC) call: the models served now, inference, the task records. They
// are declared there (oip.Server); *Server satisfies
// oip.Server[*Model], and this package does not import oip.

// Model returns the model HTTP and gRPC requests naming name run on (the
// first configured of that name), or the error to answer with: the
// unknown model, naming the models this server serves. Safe for
// concurrent use: models come and go (AddModel, RemoveModel).
func (s *Server) Model(name string) (*Model, error) {
	mt := s.models.Load()
	m, ok := mt.Model(name)
	if !ok {
		return nil, mt.Unknown(name)
	}
	return m, nil
}

// Models returns the models HTTP and gRPC requests may name, in the order
// added. The slice is shared: the caller must not change it. Safe for
// concurrent use.
func (s *Server) Models() []*Model { return s.models.Load().Models() }

// Infer admits in, an Open Inference Protocol infer request (From
// admit.FromHTTP, from HTTP or gRPC; in.Model names the model), against
// every served model and runs it through its model's batcher ahead of
// queued tasks, as a KubeMQ query runs: it waits for the result, or for
// ctx (or the request's deadline) to end, and a request not started by
// then is not run. When it ran, reply encodes the answer (version: the
// model version that ran it); reply's error fails the request (outcome
// failure). Infer returns admission's verdict, the outcome label and,
// unless the request succeeded, the error to answer with. The request's
// trace (SpanHTTP, from the trace context in.Trace carries) ends after
// reply. The caller counts the request (Metrics.ObserveInfer). Safe for
// concurrent use.
func (s *Server) Infer(ctx context.Context, in admit.Input, reply func(version string, outputs []tensor.Tensor, t *task.Task) error) (admit.Verdict, string, error) {
	in.Traced = s.trace.tr != nil
	a := s.models.Load().Admit(in)
	root := s.trace.httpRoot(in.Model, &a, in.Received)
	outputs, ran, outcome, err := s.runSync(ctx, &a, root)
	if err == nil {
		if err = reply(a.Model.version(ran), outputs, a.Task); err != nil {
			outcome = OutcomeFailure
		}
	}
	endRoot(root, outcome, err)
	return a.Verdict, outcome, err
}

// Record returns the result record stored for taskID (Config.Store), and
// whether there is one: /v1/tasks/{id}. Safe for concurrent use.
func (s *Server) Record(taskID string) ([]byte, bool) { return s.cfg.Store.Get(taskID) }

// ObserveInfer counts one Open Inference Protocol infer request, via
// "http" or "grpc", of model ("" when it names none) with its outcome
// label, answered d after it arrived: inferq_http_infer_total or
// inferq_grpc_infer_total, the Triton counters (see inference) and, for a
// known model, inferq_sync_duration_seconds{via}. Package oip calls it
// once per request (oip.Observer). Safe for concurrent use.
func (m *Metrics) ObserveInfer(via, model, outcome string, d time.Duration) {
	c := m.HTTPInfer
	if via == "grpc" {
		c = m.GRPCInfer
	}
	c.WithLabelValues(model, outcome).Inc()
	m.inference(model, outcome)
	if model != "" {
		m.SyncDuration.WithLabelValues(model, via).Observe(d.Seconds())
	}
}
