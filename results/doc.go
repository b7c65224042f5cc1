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
// goes to the spool: a directory (Config.DataDir), or memory only when the
// caller chose so explicitly (Config.MemoryOnly). [Store.Run] replays
// spooled records to the broker once it answers again, in order per task,
// and reloads the directory a previous process left behind. A record larger
// than Config.MaxResultBytes stays whole in the spool while the broker gets
// the small substitute the caller built. [Store.Get] answers lookups from
// the spool and from a bounded cache of recently stored records.
//
// The spool never drops a record the broker does not have to make room.
// When such records fill its bounds (in memory, or on disk) [Store.Full]
// turns true and the caller stops taking work until the replay has made
// room; records still in flight are taken beyond the bounds. A disk write
// that fails keeps the record in memory (Run writes it once the disk takes
// it again); a read that fails keeps the record for a later pass, unless the
// file is corrupt (set aside as *.bad, counted as lost).
//
// Retries wait with github.com/cenkalti/backoff/v5; a Broker marks a refusal
// that retrying cannot fix with backoff.Permanent, and such a record is kept
// apart as undeliverable: counted, on disk, answered by Get, never sent
// again. The replay tells the broker away (Config.BrokerAway: the whole pass
// pauses with backoff) from a record that fails on its own (the pass moves
// on; that task waits its own backoff), so a run of failing records at the
// head of the spool does not hold back the ones behind it. While the broker
// is away, the warnings each record would log (retrying, spooled, replay
// failing) are logged at most once per Config.LogRepeatEvery, with a count
// of the ones dropped (package lograte); the counters in Stats count every
// one.
//
// Records are opaque bytes here: their JSON encoding belongs to package task.
package results
