// Package consumer is inferq's serving loop: one poller per queue, intake
// (decode, validate, attempts, deadline), the hand-off to each model's
// batcher, and the writers that store each result and only then settle the
// task's message (ack, delayed retry, dead letter queue, unprocessable
// queue), with progress events, the DLQ alert hook and the HTTP endpoints.
//
// Stages are separate goroutines joined by bounded channels, so a slow stage
// applies backpressure instead of blocking the others:
//
//	mq.Poller --Deliver--> intake workers --Enqueue--> runtime.Batcher
//	    --Done--> writers --results.Store.Put--> Ack / Retry / DeadLetter
//
// The failure rules are those of DESIGN.md section 4: a message is acked only
// after its terminal record is stored; retries back off through a delayed
// resend; permanent failures are not retried; a crash counts as an attempt
// (see Journal); a task past its deadline is not run.
package consumer
