// Package broker is an in-process server of the subset of the KubeMQ gRPC
// protocol that github.com/kubemq-io/kubemq-go v1.9.0 uses: queue streams
// (send, poll, ack, nack, requeue, ack-all), the legacy queue calls, queue
// info, events with groups, events store with replay, queries with groups and
// timeouts, and Ping.
//
// It runs on a single node and keeps everything in memory; with
// Options.DataDir (Open) it also keeps its queues and events store on disk
// and loads them at start (persist.go, persist_wal.go). It exists so that
// tests and `inferq serve --embedded-broker` can talk real gRPC through the
// real kubemq-go client without an external KubeMQ. It is not meant for
// production. It reproduces the KubeMQ semantics that clients rely on (see
// shared/KUBEMQ.md in the steering repository), not the real broker's bugs,
// with one exception on purpose: messages stranded in partly settled poll
// transactions (trap 13, queue_strand.go). Clients must be built around that
// trap, so the embedded broker makes them meet it, and the path they run in
// tests is the one they run against KubeMQ.
//
// Channel names are refused like the real broker refuses them (empty, a
// space, '*' or '>' where wildcards are not allowed, a trailing '.': Errors
// 120, 102, 107, 108, 119), and one more case on purpose: a control
// character (newline, tab, NUL, DEL) gets the white-space refusal. The
// real broker takes such a name and is damaged by it (trap 19); here a
// client that sends one meets a refusal in its tests instead of nothing.
//
// Rules other SDKs meet first, as the real broker answers them (shared
// KUBEMQ.md traps 15 and 18; rows in conformance_sdk_test.go):
//   - an events store subscription's client id may hold only [A-Za-z0-9_-]:
//     else Internal "stan: invalid clientID: only alphanumeric and `-` or
//     `_` characters allowed", checked before the channel and start policy;
//   - one open events store subscription per client id, across channels and
//     groups: a second gets Internal "stan: clientID already registered"
//     until the first one's stream ends (sends and events subscriptions may
//     share the id);
//   - SendQueueMessagesBatch without messages: Unknown "empty messages batch";
//   - Ping reports the start time (Unix seconds) and the uptime in seconds.
//
// Files: server.go (options, lifecycle, Ping), queue_store.go (channels,
// send, take, settle), queue_stream.go (the queues_stream transactions),
// queue_strand.go (stranding), queue_rpc.go (legacy queue calls),
// queue_info.go (QueuesInfo, snapshots), queue_ring.go (the FIFO and delay
// heap), events*.go, pubsub.go and queries.go (the pub/sub side), persist*.go
// (the data dir).
package broker
