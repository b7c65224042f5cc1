// Package results stores finished task records so that none is ever lost.
//
// A [Store] writes each record through a small [Broker] interface (package mq
// satisfies it; package results knows nothing of the KubeMQ SDK):
//
//   - a record whose task named a reply channel becomes one event on that
//     KubeMQ Events Store channel, tagged task_id and status;
//   - any other terminal record replaces the task's record on the per-task
//     queue channel <prefix><task_id> that the Python Ray Serve adapter reads
//     (see compat.go for how the old record is removed without the 1 s purge).
//
// A write that still fails after its retries, or whose context ends first,
// goes to the spool: memory, and a directory when one is configured. [Store.Run]
// replays spooled records to the broker once it answers again, in order per
// task, and reloads the directory a previous process left behind. A record
// larger than Config.MaxResultBytes stays whole in the spool while the broker
// gets the small substitute the caller built. [Store.Get] answers lookups from
// the spool and from a bounded cache of recently stored records.
//
// Retries wait with github.com/cenkalti/backoff/v5; a Broker marks a refusal
// that retrying cannot fix with backoff.Permanent, and such a record is never
// sent again. While the broker is away, the warnings each record would log
// (retrying, spooled, replay failing) are logged at most once per
// Config.LogRepeatEvery, with a count of the ones dropped (package lograte);
// the counters in Stats count every one.
//
// Records are opaque bytes here: their JSON encoding belongs to package task.
package results
