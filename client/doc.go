// Package client is inferq's Go producer API over package mq: it enqueues
// inference tasks on a model's queue and waits for their result records.
//
// Results come back pushed, never polled (KUBEMQ.md trap 11): every task
// carries reply_to = the producer's reply channel, one long-lived Events
// Store channel per producer identity ("inferq.reply.<identity>"), and the
// Client keeps one subscription to it whose events it hands out by task_id
// to Wait. Reply channels are named per identity, never per run or per task:
// each channel costs the broker files for 24 h. Run one process per
// identity; a second one sharing it receives the first one's results too
// and has to drop them.
//
// Delivery is at least once: a task's record may arrive twice, and the
// Client keeps the first terminal record per task_id. A record that
// arrives before anyone waits for it is kept for a later Wait (a bounded
// number of them for tasks this Client did not enqueue).
//
// The subscription is durable: with Config.CursorFile the Client writes the
// events store sequence below which every record has been handed out (its
// low-water mark), and a restarted Client with the same identity and file
// resubscribes from there, so records written while it was down, or
// received and not yet waited for, come again.
//
// A result over the model's result.max_result_bytes reaches the producer
// as a record with result_ref and no result; the whole record stays on the
// replica that ran the task, at its HTTP listener's /v1/tasks/{id}.
// Response (or FollowRef) reads it from there, with Config.HTTPToken, a
// relative reference against Config.HTTPURL; Record.Response alone returns
// a *task.ResultRefError.
//
// Tasks sent with WithCompat carry no reply_to: inferq writes their record
// to the per-task queue channel "rayserve-result-<task_id>" of the Python
// adapter, which Status reads with a peek.
package client
