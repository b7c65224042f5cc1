// Package runtime runs ONNX models through onnxruntime (via
// github.com/yalue/onnxruntime_go): it locates the shared library, owns the
// process-wide onnxruntime environment, opens one Session per model file and
// device (CPU, or a CUDA GPU through the CUDA execution provider), and turns
// a list of independent requests into as few onnxruntime runs as possible:
// items whose per-item dims match are concatenated along dim 0, run once,
// and the outputs are split back per item.
//
// One request's path: batch.Batcher.Enqueue --> the gatherer cuts
// shape-group batches by the batch.Policy and a worker runs each (package
// batch, pure Go) --> Session.RunBatch, a batch.Runner, assembles, runs and
// splits (batch.go); the request's Owner hears RunStarting and Finished. Sessions, devices and options are in
// session.go, placement on GPUs in placement.go.
//
// Tensors (package tensor) are raw little-endian row-major bytes tagged with
// an Open Inference Protocol datatype (tensor.DType), which is what the
// binary wire format carries
// and what onnxruntime reads, so a request's bytes reach onnxruntime with at
// most the one copy that concatenation needs.
//
// Datatypes: BOOL, UINT8..UINT64, INT8..INT64, FP16, FP32 and FP64 travel
// as raw bytes both ways. BYTES (ONNX STRING) works through onnxruntime_go
// v1.35.0's StringTensor, with one limit: inputs are handed to onnxruntime
// as C strings (FillStringTensor), so an element holding a NUL byte would be
// cut short; such an item is refused with a *batch.InputError instead. Outputs
// are read with their lengths and carry any byte. FP16 outputs must have
// static dims apart from dim 0: onnxruntime_go v1.35.0 cannot hand over an
// FP16 tensor that onnxruntime allocated (it copies one byte per element),
// so they are always pre-allocated, and NewSession refuses models where
// that is impossible.
//
// Errors about a request (wrong datatype, rank or dims, missing or unknown
// input, unknown output) are *batch.InputError values that wrap
// batch.ErrInvalidInput; they are per item, so one bad item never fails its neighbours.
//
// Nothing here reads the environment or flags: cmd/inferq passes the
// INFERQ_ORT_LIB value and the executable's directory to LocateLibrary.
package runtime
