package oip

import (
	"math"
	"path/filepath"

	"github.com/inferq/inferq/admit"
	"github.com/inferq/inferq/models"
	pb "github.com/inferq/inferq/oip/inferencepb"
	"github.com/inferq/inferq/tensor"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// tritonConfig is the configuration of the model configured c with tensors
// info in Triton's terms (ModelConfig). The batcher stacks requests on the
// first dim, so max_batch_size is the most rows admission lets a request
// carry (admit.MaxBatchSize: batching.max_batch_size, or 0 for a model
// with an input of fixed dim 0, which has no batch dim) and, when it is
// above 0, the dims leave that dim out, as Triton's do for a batching
// model.
func tritonConfig(c *models.Model, info tensor.ModelInfo) *pb.ModelConfig {
	maxBatch := admit.MaxBatchSize(c, info)
	cfg := &pb.ModelConfig{
		Name: c.Name, Platform: "onnxruntime_onnx", Backend: "onnxruntime",
		MaxBatchSize:         clampInt32(maxBatch),
		DefaultModelFilename: filepath.Base(c.Path),
		InstanceGroup:        []*pb.ModelInstanceGroup{tritonInstances(*c)},
		SchedulingChoice:     &pb.ModelConfig_DynamicBatching{DynamicBatching: tritonBatching(c.Batching)},
	}
	batched := maxBatch > 0
	for _, t := range info.Inputs {
		cfg.Input = append(cfg.Input, &pb.ModelInput{Name: t.Name, DataType: tritonDType(t), Dims: tritonDims(t.Dims, batched)})
	}
	for _, t := range info.Outputs {
		cfg.Output = append(cfg.Output, &pb.ModelOutput{Name: t.Name, DataType: tritonDType(t), Dims: tritonDims(t.Dims, batched)})
	}
	return cfg
}

// tritonBatching is batching's dynamic batching and queue policy; the
// default priority level is the one a request without one gets.
func tritonBatching(b models.Batching) *pb.ModelDynamicBatching {
	d := &pb.ModelDynamicBatching{
		MaxQueueDelayMicroseconds: uint64(max(b.MaxQueueDelay.D().Microseconds(), 0)),
		DefaultQueuePolicy: &pb.ModelQueuePolicy{
			TimeoutAction:              pb.ModelQueuePolicy_REJECT,
			DefaultTimeoutMicroseconds: uint64(max(b.DefaultQueueTimeout.D().Microseconds(), 0)),
			MaxQueueSize:               uint32(min(max(b.MaxQueueSize, 0), math.MaxUint32)),
		},
	}
	for _, s := range b.PreferredBatchSizes {
		d.PreferredBatchSize = append(d.PreferredBatchSize, clampInt32(s))
	}
	if b.PriorityLevels > 0 {
		d.PriorityLevels = uint64(b.PriorityLevels)
		d.DefaultPriorityLevel = uint64(b.PriorityLevels)
		if b.DefaultPriorityLevel > 0 {
			d.DefaultPriorityLevel = uint64(b.DefaultPriorityLevel)
		}
	}
	return d
}

// tritonInstances is the model's device setting as an instance group:
// instances sessions on each device.
func tritonInstances(c models.Model) *pb.ModelInstanceGroup {
	g := &pb.ModelInstanceGroup{Name: c.Name, Count: clampInt32(c.Instances), Kind: pb.ModelInstanceGroup_KIND_AUTO}
	switch c.Device.Kind {
	case models.DeviceCPU:
		g.Kind = pb.ModelInstanceGroup_KIND_CPU
	case models.DeviceCUDA:
		g.Kind = pb.ModelInstanceGroup_KIND_GPU
	case models.DeviceList:
		g.Kind = pb.ModelInstanceGroup_KIND_GPU
		for _, n := range c.Device.GPUs {
			g.Gpus = append(g.Gpus, clampInt32(n))
		}
	}
	return g
}

// tritonDType is t's element type as Triton's DataType: its Open
// Inference Protocol name prefixed TYPE_, BYTES being TYPE_STRING and
// onnxruntime's BFLOAT16 TYPE_BF16; TYPE_INVALID for the rest.
func tritonDType(t tensor.TensorInfo) pb.DataType {
	name := t.Datatype()
	switch name {
	case "BYTES":
		name = "STRING"
	case "BFLOAT16":
		name = "BF16"
	}
	return pb.DataType(pb.DataType_value["TYPE_"+name]) // absent: 0, TYPE_INVALID
}

func tritonDims(dims []int64, batched bool) []int64 {
	if batched && len(dims) > 0 {
		dims = dims[1:]
	}
	return append([]int64{}, dims...)
}

func clampInt32(n int) int32 { return int32(min(max(n, math.MinInt32), math.MaxInt32)) }

// The metrics tritonStats reads, by name: every path reports to them (see
// consumer.Metrics).
const (
	metricSuccess   = "inferq_inference_request_success_total"    // {model}
	metricFailure   = "inferq_inference_request_failure_total"    // {model,reason}
	metricBatchSize = "inferq_batch_size"                         // {model}
	metricDuration  = "inferq_task_duration_seconds"              // {model,stage}
	metricCompute   = "inferq_inference_compute_duration_seconds" // {model}
	stageBatchWait  = "batch_wait"                                // metricDuration's stage: admission to run
)

// tritonStats are the model's statistics in Triton's terms, read from the
// metrics every path reports to, as g gathers them: success and fail
// counts (inferq_inference_request_success_total and ..._failure_total,
// every reason), queue (the batch_wait stage of
// inferq_task_duration_seconds: admission to run, every path),
// compute_infer (inferq_inference_compute_duration_seconds: the run of the
// batch each request ran in), inference_count (the successes) and
// execution_count (the runs, inferq_batch_size's count). Not measured, so
// 0: the durations of success and fail (inferq does not time a request's
// whole stay by outcome), compute_input and compute_output (part of
// compute_infer here), last_inference. A nil g reads nothing.
func tritonStats(g prometheus.Gatherer, model, version string) *pb.ModelStatistics {
	var success, fail, runs uint64
	queue, compute := &pb.StatisticDuration{}, &pb.StatisticDuration{}
	var fams map[string]*dto.MetricFamily
	if g != nil {
		mfs, _ := g.Gather() // what it could gather, when some collector failed
		fams = make(map[string]*dto.MetricFamily, len(mfs))
		for _, f := range mfs {
			fams[f.GetName()] = f
		}
	}
	byModel := map[string]string{"model": model}
	collectFor(fams[metricSuccess], byModel, func(d *dto.Metric) { success += uint64(d.GetCounter().GetValue()) })
	collectFor(fams[metricFailure], byModel, func(d *dto.Metric) { fail += uint64(d.GetCounter().GetValue()) })
	collectFor(fams[metricBatchSize], byModel, func(d *dto.Metric) { runs += d.GetHistogram().GetSampleCount() })
	collectFor(fams[metricDuration], map[string]string{"model": model, "stage": stageBatchWait}, addDuration(queue))
	collectFor(fams[metricCompute], byModel, addDuration(compute))
	return &pb.ModelStatistics{
		Name: model, Version: version, InferenceCount: success, ExecutionCount: runs,
		InferenceStats: &pb.InferStatistics{
			Success: &pb.StatisticDuration{Count: success}, Fail: &pb.StatisticDuration{Count: fail},
			Queue: queue, ComputeInput: &pb.StatisticDuration{}, ComputeInfer: compute, ComputeOutput: &pb.StatisticDuration{},
		},
	}
}

// addDuration adds a histogram of seconds to d.
func addDuration(d *pb.StatisticDuration) func(*dto.Metric) {
	return func(x *dto.Metric) {
		h := x.GetHistogram()
		d.Count += h.GetSampleCount()
		d.Ns += uint64(max(h.GetSampleSum(), 0) * 1e9)
	}
}

// collectFor calls fn with each of f's series whose labels include
// labels (a nil f has none).
func collectFor(f *dto.MetricFamily, labels map[string]string, fn func(*dto.Metric)) {
	for _, d := range f.GetMetric() {
		if hasLabels(d, labels) {
			fn(d)
		}
	}
}

func hasLabels(d *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range d.GetLabel() {
		if v, ok := want[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}
