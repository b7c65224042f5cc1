// Package admit is admission: the one step that turns what arrived (a
// queued task, a KubeMQ sync query, an Open Inference Protocol infer
// request over HTTP or gRPC) into a runnable request or a verdict, with the
// same limits and the same error texts on every path.
//
// A Table holds the models a request may name (a queue's, by task_name;
// or every served model, by the URL or model_name); Table.Admit reads an
// Input (the body, the tags, the model named, the time it arrived) against
// it and returns an Admitted: the task, its model, the checked input
// tensors, the outputs asked for, the deadline, the priority and the
// caller's span; or a Verdict saying why it must not run (undecodable,
// bad names, unknown model, bad input, too large, expired, cancelled) with
// the error to answer by. CheckBody, BodyLimit and Limits are the size
// rules every path applies before and while it reads a body.
//
// Why a package of its own: the queue loop (package consumer), the sync
// queries and the front ends (package oip) all admit, and must refuse the
// same request with the same verdict and the same words; admission reads
// and decides, and writes nothing. What happens to a refused request (a
// record, the unprocessable queue, an HTTP status, a gRPC code, an outcome
// label) is its caller's business.
//
// A Table is generic in its model type (Model: a configuration and
// tensors), so that the consumer keeps its *consumer.Model, with its
// batcher and queue policy, and gets it back from Admit without a type
// assertion, while this package knows nothing of batchers or brokers.
//
// Concurrency: a Table is built with NewTable and Add, then shared and
// never changed (With and Without return changed copies, which callers
// swap in whole), so Admit and the lookups are safe for concurrent use
// without a lock. Admit changes nothing but what it returns; Input.Records
// must be safe for concurrent use.
package admit
