// Package crash counts the attempts of a task that ended with the process
// running it, and shares those counts between the replicas of a queue.
//
// KubeMQ gives a message back uncounted when its consumer dies
// (KUBEMQ.md), so a task that kills the worker would otherwise loop
// forever: a crash counts as an attempt (DESIGN.md section 4), and a
// message whose count reaches max_retries + 1 is dead-lettered without
// running again. The replicas of a queue share one budget (DESIGN.md
// 4.5): a message that crashed one replica and went back to the queue is
// counted by whichever replica takes it next. Three parts:
//
//   - Journal (journal.go) records each message's run before it starts and
//     forgets it when it ends; ids still started when a process ends are
//     its crashes, read by the next process on the same data dir. The
//     file format (attempts.journal, one line per record, ids written as
//     quoted tokens) is described there.
//   - Report (report.go) is what a process publishes on <queue>.crashes
//     (Channel), an Events Store channel every replica of the queue
//     reads: its journal's counts, cumulative, keyed by the journal's id.
//     DecodeReport refuses anything Encode would not write. With a fleet
//     key (FleetConfig.Key) each report is signed (sign.go: HMAC-SHA256
//     over its channel, fields and signing time) and only signed reports
//     within the window count: anyone can publish on the channel.
//   - Fleet (fleet.go) publishes this process's report at start and a
//     heartbeat after, reads every replica's reports into a bounded table
//     (table.go: the largest count per journal and message, summed over
//     journals), and answers the consumer's two questions: how many times
//     has this message crashed across the fleet (Crashes), and how long
//     must a message with crashes wait so that the replica that died
//     running it can restart and report (HoldFor).
//
// Package consumer is the caller: it calls Journal.Start right before a
// run and Journal.Done after it, asks Fleet.Crashes and Fleet.HoldFor when
// it takes a message, and runs Fleet.Run while it serves. The worker opens
// the Journal on its data dir (without one the consumer keeps a
// memory-only journal) and hands the consumer the events store (nil: no
// fleet; NewFleet returns nil, Crashes is then the journal's count and
// HoldFor 0).
//
// A full data dir does not stop tasks: the journal reports itself failing
// (Journal.Stats: /readyz and a metric), warns once a minute at most, and
// counts a crash only for a run whose start it wrote and whose end it did
// not (the end is marked over the start's bytes: no new space needed).
//
// Concurrency: Journal, Fleet and the table are safe for concurrent use;
// a nil *Fleet is valid and means no fleet. Journal.Start returns only
// once its line is written, so a crash of the process (not of the machine)
// cannot lose it. Crashes and HoldFor take a mutex and read a map: they
// never wait on the broker; publishing retries in Run's goroutines while
// the events store is away, and the journal alone counts meanwhile.
package crash
