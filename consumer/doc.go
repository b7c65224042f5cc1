// Package consumer is inferq's serving loop: one poller per queue, intake,
// the hand-off to each model's batcher, and the writers that store each
// result and only then settle the task's message, with progress events,
// the DLQ alert hook and KubeMQ sync queries. Admission is package admit's,
// crash accounting package crash's, the batcher package batch's; the Open
// Inference Protocol front ends over HTTP and gRPC (package oip) call the
// Server through the small interfaces declared there (frontend.go), and
// this package does not import them.
//
// One task's path, in files:
//
//	intake.go  mq.Poller --Deliver--> deliver --> intake workers: take;
//	           admit (package admit): body, tags and the queue's model
//	           table in; a runnable request (model, inputs, outputs,
//	           deadline, priority, the caller's span) or a verdict
//	           (undecodable, unknown model, bad input, too large, expired,
//	           cancelled) out;
//	           --Enqueue--> batch.Batcher, the job its Request's Owner
//	settle.go  job.RunStarting (journal, progress), job.Finished --> writers:
//	           decide (a pure function: ack, retry after d, dead-letter,
//	           unprocessable, give back), then settle, the one place that
//	           ends a message: results Store.Put; afterStore (a second pure
//	           step: what a failed store changes); then Ack, or a copy sent
//	           (Sender.SendRetry, SendDeadLetter, SendCopy) and Ack, or
//	           NAck, GiveBack, ReQueue. Messages intake did not take end in
//	           refuse; polls that spread.go moves to another shard, in
//	           moveTo.
//
// The broker is the interfaces of server.go (Broker, Poller, Sender):
// Conn adapts an *mq.Conn, and an in-memory fake drives the loop in tests
// (fakebroker_test.go). mq decides nothing; its Poller settles nothing.
//
// server.go holds the Server's construction, Run and the queue-depth
// sampler; dynamic.go the models added and removed while it runs; policy.go
// the queue policy (max_queue_size, default_queue_timeout); shards.go the
// sharded queues; spread.go a fleet on one plain queue (shard 0's polls
// moved to the replicas with room); events.go progress events and DLQ alerts; metrics.go
// the collectors; tracing.go the spans. Sync queries (query.go) and Open
// Inference Protocol infer requests (frontend.go: Infer, for package oip)
// take the same admission and the same batcher, ahead of queued tasks, and
// answer the caller instead of settling a message (runSync). Traces ride
// on contexts (tracing.go). Package consumertest holds the fake model and
// the helpers that this package's tests and package oip's share.
//
// Stages are separate goroutines joined by bounded channels, so a slow stage
// applies backpressure instead of blocking the others. The failure rules are
// those of DESIGN.md section 4: a message is acked only after its terminal
// record is stored; retries back off through a delayed resend; permanent
// failures are not retried; a crash counts as an attempt (package crash); a
// task past its deadline is not run.
package consumer
