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

// Spreading: a fleet on one plain queue. Producers that know nothing of
// shards (the Python adapter, kubemq-js, anything that sends to the queue's
// own name) fill shard 0 only, whose one owner would serve them alone
// (KUBEMQ.md traps 12, 13 forbid a second consumer on the channel). So
// while a sharded queue has more than one live member, the owner of shard 0
// runs none of it: it moves each poll of shard 0 whole into a shard
// (1..n-1, its own included) of the replica with the fewest messages
// waiting and held, when that replica has room, then acks the poll in one
// settlement (why whole, copied then acked: KUBEMQ.md facts 40 and 41).
// Every replica then runs the shards it owns, one batch open per channel,
// and a replica that owns several runs their batches side by side. A
// replica alone moves nothing: it runs shard 0 itself and pays no extra
// hop, unless its devices are the bottleneck (pipe.go).
//
// The copy keeps the task's body, metadata and tags, carries its attempts
// (TagAttempt: the attempt it would have had) and the producer's
// MaxReceiveCount and MaxReceiveQueue. A copy that cannot be sent runs here
// instead (nothing is NAcked, so no receive is counted).
//
// A replica's death: its shards stay unpolled until the others see its
// heartbeats stop (Config.ShardBeat x 5, 5 s by default), then one of them
// owns and drains them; what it held unsettled comes back to its channel
// when the broker drops its connection. Shard 0's owner dying stops the
// moving for as long, while plain producers' tasks wait in shard 0.
