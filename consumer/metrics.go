package consumer

import (
	"time"

	"github.com/inferq/inferq/batch"
	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of a task, the values of inferq_tasks_total's outcome label.
const (
	OutcomeSuccess       = "success"
	OutcomeFailure       = "failure"       // final failure (DLQ)
	OutcomeBadInput      = "bad_input"     // input does not fit the model
	OutcomeRetry         = "retry"         // failed, retried later
	OutcomeExpired       = "expired"       // past its deadline, not run
	OutcomeCancelled     = "cancelled"     // record read CANCELLED, not run
	OutcomeUnknownModel  = "unknown_model" // task_name names no model
	OutcomeUnprocessable = "unprocessable" // body could not be decoded
	OutcomeQueueFull     = "queue_full"    // sync request refused at batching.max_queue_size
	OutcomeQueueTimeout  = "queue_timeout" // waited past batching.default_queue_timeout, not run
)

// Stages of inferq_task_duration_seconds.
const (
	StageQueue     = "queue"      // created_at (or broker timestamp) to intake
	StageBatchWait = "batch_wait" // intake to the start of its run
	StageInfer     = "infer"      // the run
	StageStore     = "store"      // storing the record
)

// Metrics are the consumer's Prometheus collectors. They are registered on
// the registry given to NewMetrics, never on the default one. Safe for
// concurrent use.
type Metrics struct {
	Tasks         *prometheus.CounterVec   // inferq_tasks_total{model,outcome}
	Duration      *prometheus.HistogramVec // inferq_task_duration_seconds{model,stage}
	BatchSize     *prometheus.HistogramVec // inferq_batch_size{model}
	Inflight      *prometheus.GaugeVec     // inferq_inflight_tasks{model}
	Retries       prometheus.Counter       // inferq_retries_total
	DLQ           prometheus.Counter       // inferq_dlq_total
	Unprocessable prometheus.Counter       // inferq_unprocessable_total
	QueueDepth    *prometheus.GaugeVec     // inferq_queue_depth{queue}
	BrokerUp      prometheus.Gauge         // inferq_broker_up
	ProgressDrops prometheus.Counter       // inferq_progress_dropped_total
	// ProgressEvents counts the events (progress and DLQ alerts) handed to
	// the broker; with ProgressDrops, the share lost.
	ProgressEvents prometheus.Counter // inferq_progress_events_total
	AlertDrops     prometheus.Counter // inferq_alerts_dropped_total
	SettleErrors   prometheus.Counter // inferq_settle_errors_total
	// Moved counts the messages of a queue's shard 0 its owner moved to
	// another shard (a fleet on one plain queue, spread.go).
	Moved *prometheus.CounterVec // inferq_queue_moved_total{queue}
	// Pipelined is 1 while a lone replica moves its queue's shard 0 into
	// its own shards to keep its devices busy (pipe.go).
	Pipelined *prometheus.GaugeVec // inferq_queue_pipelined{queue}
	// Sync inference: KubeMQ queries and Open Inference Protocol HTTP
	// requests, by model and outcome (OutcomeSuccess, OutcomeFailure,
	// OutcomeBadInput, OutcomeUnknownModel, OutcomeExpired).
	Queries      *prometheus.CounterVec   // inferq_queries_total{model,outcome}
	HTTPInfer    *prometheus.CounterVec   // inferq_http_infer_total{model,outcome}
	GRPCInfer    *prometheus.CounterVec   // inferq_grpc_infer_total{model,outcome}
	SyncDuration *prometheus.HistogramVec // inferq_sync_duration_seconds{model,via}
	// The Triton dashboard's per-model series, for every path (tasks,
	// queries, HTTP, gRPC) alike; see docs/operating.md, "Health, metrics, traces and logs".
	InferSuccess *prometheus.CounterVec   // inferq_inference_request_success_total{model}
	InferFailure *prometheus.CounterVec   // inferq_inference_request_failure_total{model,reason}
	Compute      *prometheus.HistogramVec // inferq_inference_compute_duration_seconds{model}
	Pending      *prometheus.GaugeVec     // inferq_pending_requests{model}
}

// NewMetrics creates the collectors and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Tasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inferq_tasks_total", Help: "Tasks handled, by model and outcome.",
		}, []string{"model", "outcome"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "inferq_task_duration_seconds", Help: "Time a task spends in each stage: queue, batch_wait, infer, store.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 14),
		}, []string{"model", "stage"}),
		BatchSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "inferq_batch_size", Help: "Rows per inference run.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
		}, []string{"model"}),
		Inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "inferq_inflight_tasks", Help: "Tasks taken from the queue and not yet settled.",
		}, []string{"model"}),
		Retries:       prometheus.NewCounter(prometheus.CounterOpts{Name: "inferq_retries_total", Help: "Failed attempts that were retried."}),
		DLQ:           prometheus.NewCounter(prometheus.CounterOpts{Name: "inferq_dlq_total", Help: "Tasks moved to a dead letter queue."}),
		Unprocessable: prometheus.NewCounter(prometheus.CounterOpts{Name: "inferq_unprocessable_total", Help: "Messages forwarded to an unprocessable queue."}),
		QueueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "inferq_queue_depth", Help: "Messages waiting in each served queue, as the broker estimates.",
		}, []string{"queue"}),
		BrokerUp:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "inferq_broker_up", Help: "1 while the broker answers, 0 while it is away."}),
		ProgressDrops:  prometheus.NewCounter(prometheus.CounterOpts{Name: "inferq_progress_dropped_total", Help: "Progress events dropped because the publisher was behind or the broker away."}),
		ProgressEvents: prometheus.NewCounter(prometheus.CounterOpts{Name: "inferq_progress_events_total", Help: "Progress events (and DLQ alert events) handed to the broker; a later refusal by the broker counts in inferq_progress_dropped_total too."}),
		AlertDrops:     prometheus.NewCounter(prometheus.CounterOpts{Name: "inferq_alerts_dropped_total", Help: "DLQ alerts (event or webhook) that could not be delivered."}),
		SettleErrors:   prometheus.NewCounter(prometheus.CounterOpts{Name: "inferq_settle_errors_total", Help: "Ack, NAck or ReQueue failures the broker reported."}),
		Moved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inferq_queue_moved_total", Help: "Tasks this replica moved from a sharded queue's own channel (shard 0, where producers that know no shards send) to the shard with the most room: while other replicas serve the queue, or while this replica alone pipelines it.",
		}, []string{"queue"}),
		Pipelined: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "inferq_queue_pipelined", Help: "1 while this replica, alone on a sharded queue, moves the queue's own channel into its shards because its devices are busy most of the time (polling the next batch while one runs), else 0.",
		}, []string{"queue"}),
		Queries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inferq_queries_total", Help: "Sync inference queries (KubeMQ) answered, by model and outcome.",
		}, []string{"model", "outcome"}),
		HTTPInfer: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inferq_http_infer_total", Help: "Open Inference Protocol HTTP infer requests, by model and outcome.",
		}, []string{"model", "outcome"}),
		GRPCInfer: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inferq_grpc_infer_total", Help: "Open Inference Protocol gRPC ModelInfer calls, by model and outcome.",
		}, []string{"model", "outcome"}),
		SyncDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "inferq_sync_duration_seconds", Help: "Time from receipt to answer of sync inference requests, via query, http or grpc.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 14),
		}, []string{"model", "via"}),
		InferSuccess: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inferq_inference_request_success_total", Help: "Inference requests that succeeded, every path (task, query, HTTP, gRPC), by model (Triton's nv_inference_request_success).",
		}, []string{"model"}),
		InferFailure: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inferq_inference_request_failure_total", Help: "Inference requests that failed for good, every path, by model and reason (the outcome label: failure, bad_input, expired, cancelled, queue_full, queue_timeout) (Triton's nv_inference_request_failure).",
		}, []string{"model", "reason"}),
		Compute: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "inferq_inference_compute_duration_seconds", Help: "Run time of the batch each request ran in, one observation per request, every path (Triton's nv_inference_compute_infer_duration_us, as a histogram).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 14),
		}, []string{"model"}),
		Pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "inferq_pending_requests", Help: "Requests admitted and waiting for their run, every path, by model (Triton's nv_inference_pending_request_count); batching.max_queue_size bounds it.",
		}, []string{"model"}),
	}
	for _, c := range []prometheus.Collector{m.Tasks, m.Duration, m.BatchSize, m.Inflight, m.Retries, m.DLQ,
		m.Unprocessable, m.QueueDepth, m.BrokerUp, m.ProgressDrops, m.ProgressEvents, m.AlertDrops, m.SettleErrors, m.Moved, m.Pipelined,
		m.Queries, m.HTTPInfer, m.GRPCInfer, m.SyncDuration, m.InferSuccess, m.InferFailure, m.Compute, m.Pending} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// BatchObserver feeds one model's batcher statistics into the metrics:
// inferq_batch_size, the batch_wait stage of inferq_task_duration_seconds
// (every request's queue wait, whatever its path: Triton's queue duration)
// and inferq_inference_compute_duration_seconds.
func (m *Metrics) BatchObserver(model string) batch.Observer {
	return batchObserver{wait: m.Duration.WithLabelValues(model, StageBatchWait), size: m.BatchSize.WithLabelValues(model),
		compute: m.Compute.WithLabelValues(model)}
}

type batchObserver struct {
	wait, size, compute prometheus.Observer
}

func (o batchObserver) ObserveQueueWait(d time.Duration) { o.wait.Observe(d.Seconds()) }

func (o batchObserver) ObserveBatch(s batch.Stats) {
	o.size.Observe(float64(s.Rows))
	run := s.Run.Seconds()
	for range s.Items {
		o.compute.Observe(run)
	}
}

// inference counts a request's final outcome (an outcome label) in the
// Triton dashboard's success and failure counters: the one place every
// path (settle for tasks, answer for queries, the HTTP and gRPC handlers)
// reports to. A retry is not final; a request naming no model counts
// nowhere (Triton's counters are per model).
func (m *Metrics) inference(model, outcome string) {
	switch {
	case model == "", outcome == "", outcome == OutcomeRetry, outcome == OutcomeUnknownModel, outcome == OutcomeUnprocessable:
	case outcome == OutcomeSuccess:
		m.InferSuccess.WithLabelValues(model).Inc()
	default:
		m.InferFailure.WithLabelValues(model, outcome).Inc()
	}
}

// CountInference is inference for a path outside this package: call it
// once per request with the model and its outcome label.
func (m *Metrics) CountInference(model, outcome string) { m.inference(model, outcome) }

// modelMetrics are one model's collectors on the per-task path, looked up
// once instead of by label values for every task.
type modelMetrics struct {
	inflight            prometheus.Gauge
	queue, infer, store prometheus.Observer
	success             prometheus.Counter
}

func (m *Metrics) forModel(name string) *modelMetrics {
	return &modelMetrics{
		inflight: m.Inflight.WithLabelValues(name),
		queue:    m.Duration.WithLabelValues(name, StageQueue),
		infer:    m.Duration.WithLabelValues(name, StageInfer),
		store:    m.Duration.WithLabelValues(name, StageStore),
		success:  m.Tasks.WithLabelValues(name, OutcomeSuccess),
	}
}
