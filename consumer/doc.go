// Package consumer is inferq's serving loop: one poller per queue, intake,
// the hand-off to each model's batcher, and the writers that store each
// result and only then settle the task's message, with progress events,
// the DLQ alert hook, KubeMQ sync queries and the HTTP endpoints (Open
// Inference Protocol, metrics, health, task lookup).
//
// One task's path, in files:
//
//	intake.go  mq.Poller --Deliver--> deliver --> intake workers: take;
//	           admit: body, tags and the model table in; a runnable
//	           request (model, inputs, outputs, deadline, priority, the
//	           caller's span) or a verdict (undecodable, unknown model,
//	           bad input, too large, expired, cancelled) out;
//	           --Enqueue--> batch.Batcher, the job its Request's Owner
//	settle.go  job.RunStarting (journal, progress), job.Finished --> writers:
//	           decide (a pure function: ack, retry after d, dead-letter,
//	           unprocessable, give back) then settle carries it out:
//	           results Store.Put, then Ack / Retry / DeadLetter / Forward / NAck
//
// server.go holds the Server's construction, Run and the queue-depth
// sampler. Sync queries (query.go) and HTTP infer requests (oip.go) take the
// same admit and the same batcher, ahead of queued tasks, and answer the caller
// instead of settling a message. Traces ride on contexts (tracing.go).
//
// Stages are separate goroutines joined by bounded channels, so a slow stage
// applies backpressure instead of blocking the others. The failure rules are
// those of DESIGN.md section 4: a message is acked only after its terminal
// record is stored; retries back off through a delayed resend; permanent
// failures are not retried; a crash counts as an attempt (package crash); a
// task past its deadline is not run.
package consumer
