// Package batch is inferq's dynamic batcher, in pure Go: it gathers the
// requests for one model into batches by a Policy (rows per run, a queue
// delay, preferred sizes, priority levels with aging) and hands each batch
// to a Runner, at most len(Runners) x Concurrency runs at a time.
//
// One request's path: Batcher.Enqueue (batcher.go) --> the gatherer, owned
// by Run's goroutine, keeps a shape group per set of per-item dims and cuts
// batches from it (gather.go) --> a worker per run slot calls
// Runner.RunBatch --> the request's Owner hears RunStarting right before the
// run and Finished once with its ItemResult.
//
// The package knows nothing of onnxruntime: runtime.Session is the Runner
// that runs ONNX models, and tests use fakes. Errors about one item (an
// *InputError wrapping ErrInvalidInput) and ErrClosed are declared here so
// that the layers above can tell them apart without linking onnxruntime.
package batch
