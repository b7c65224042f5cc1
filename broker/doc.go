// Package broker is an in-process server of the KubeMQ gRPC protocol
// (kubemq.proto of github.com/kubemq-io/protobuf v1.3.1, every one of its 15
// RPCs): queue streams (send, poll, ack, nack, requeue, ack-all), the legacy
// queue calls and the legacy per-message queue stream, queue info, events
// with groups, events store with replay, queries with groups and timeouts,
// and Ping.
//
// It runs on a single node and keeps everything in memory; with
// Options.DataDir (Open) it also keeps its queues and events store on disk
// and loads them at start (persist.go, persist_wal.go). It exists so that
// tests and `inferq serve --embedded-broker` can talk real gRPC through the
// real kubemq-go client without an external KubeMQ. It is not meant for
// production. It reproduces the KubeMQ semantics that clients rely on (see
// docs/KUBEMQ.md), not the real broker's bugs,
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
// # RPCs and the official SDKs
//
// Every RPC is served; none answers Unimplemented. Which SDK calls which,
// read from their public sources at these versions: Go kubemq-go v1.9.0
// (the version the module proxy serves); Python kubemq 4.0.0 and 4.1.5;
// JS kubemq-js 1.2.3 (the 1.x on npm), 2.1.0 and 3.0.0; Java kubemq-Java
// v1.0.6 and kubemq-java-v2 2.1.1 and 3.1.1 (same set); .NET kubemq-CSharp
// v1.7.2 and 3.0.1:
//
//	RPC                     Go  Py4 JS1 JS2 JS3 Java1 Java2/3 .NET1 .NET3
//	SendEvent               x   x   x   .   .   x     .       x     x
//	SendEventsStream        x   x   x   x   x   x     x       x     x
//	SubscribeToEvents       x   x   x   x   x   x     x       x     x
//	SubscribeToRequests     x   x   x   x   x   x     x       x     x
//	SendRequest             x   x   x   x   x   x     x       x     x
//	SendResponse            x   x   x   x   x   x     x       x     x
//	SendQueueMessage        x   x   x   .   .   x     .       x     x
//	SendQueueMessagesBatch  x   x   x   .   x   x     .       x     x
//	ReceiveQueueMessages    x   x   x   x   x   x     x       x     x
//	StreamQueueMessage      x   .   x   .   .   x     .       x     .
//	AckAllQueueMessages     x   x   x   .   x   x     .       x     x
//	Ping                    x   x   x   x   x   x     x       x     x
//	QueuesUpstream          x   x   .   x   x   .     x       x     x
//	QueuesDownstream        x   x   .   x   x   .     x       x     x
//	QueuesInfo              x   .   .   .   .   .     .       x     .
//
// SubscribeToEvents carries both events and events store subscriptions,
// SubscribeToRequests both commands and queries. StreamQueueMessage is the
// only stream receive of kubemq-js 1.x, kubemq-Java 1.x and kubemq-CSharp
// 1.x ("transactions"); it was Unimplemented until issue 14
// (queue_legacy_stream.go). The SDKs' own copies of kubemq.proto hold no
// field this package's does not (the newer ones drop QueuesInfo).
//
// What these SDKs offer that still does not work here:
//   - channel management: create, delete and list channels (kubemq-go's
//     Create, Delete and List of EventsClient, QueuesClient and the others,
//     Python create_*_channel and list_*_channels, kubemq-js createChannel
//     and listChannels, Java createEventsChannel and the like, .NET
//     CreateChannelAsync and the like) send a query to the channel
//     "kubemq.cluster.internal.requests" and wait for the broker's answer.
//     Nothing answers it here, so it fails when its timeout passes, like
//     any query without a subscriber. The community KubeMQ v2.4.0 source
//     has no responder for it either (its channel management is the REST
//     API, not served here);
//   - the REST and WebSocket transports (kubemq-go TransportTypeRest, the
//     REST SDKs): this package serves gRPC only;
//   - anything beyond one node and memory: clustering, and persistence
//     unless another part of the package provides it;
//   - StreamQueueMessage answers a delivery as a reply to the receive
//     request, where the real broker echoes whatever request came last
//     (queue_legacy_stream.go); an SDK that matches replies by request id
//     sees no difference.
//
// Files: server.go (options, lifecycle, Ping), queue_store.go (channels,
// send, take, settle), queue_stream.go (the queues_stream transactions),
// queue_strand.go (stranding), queue_rpc.go (legacy queue calls),
// queue_legacy_stream.go (StreamQueueMessage),
// queue_info.go (QueuesInfo, snapshots), queue_ring.go (the FIFO and delay
// heap), events*.go, pubsub.go and queries.go (the pub/sub side), persist*.go
// (the data dir).
package broker

// Persistence (Options.DataDir). The queues and the events store live in
// memory as without a data dir; every change to them is also appended to the
// data dir's log (persist_wal.go), and Open rebuilds them from it. Each
// stored queue message has a key, unique in the data dir, that the log's
// records name:
//
//	put   key, message      a message stored (sent, re-queued, dead-lettered)
//	recv  key, count        its receive count changed (delivered, released)
//	gone  key               it left for good (acked, consumed, expired,
//	                        purged, moved to its dead letter queue)
//	tail  key               it went back to the tail (nack)
//	event event             an events store event (channel, sequence, time)
//	evseq last, channel     the last sequence of a channel (snapshots only)
//
// Replay keeps the messages without a gone record, in the order of their last
// put or tail record, with their last receive count: a message delivered and
// not settled when the broker stopped is back in its queue (at least once),
// and an acked one never is. Moves write the new message's put before the old
// one's gone, so a crash between them leaves a copy too many, never none.
// Queue sequence numbers start again from 1 after a restart (the messages
// keep their order); events store sequences continue.
//
// Compaction: when a segment is full the writer starts the next one; once
// the full segments since the last snapshot are as big as that snapshot, a
// goroutine replays the snapshot and those segments into a new snapshot
// (written to a temporary file, fsynced, renamed), then removes what it
// replaces. Open does the same with every segment it found before it serves.
// The events store's bounds and retention apply there too, so the disk holds
// about twice what memory holds plus three segments (one zero-filled ahead,
// persist_wal.go). A compaction holds a second copy of the live data in
// memory while it runs (the broker's own stores are not locked for it).
//
// Events store events reach subscribers only once on disk
// (storeChannel.published), so no subscriber sees an event a crash takes
// back and whose sequence number a later event would then reuse. Likewise
// a queue message sent reaches its queue once its put record is on disk
// (sending.commit), so no consumer runs a message a crash takes back.
//
// A disk that fails (a write or fsync error: ENOSPC, EIO) fails the log for
// good: every send from then on, and every send waiting for that fsync, is
// refused with the disk's error and stored nowhere; what the queues held
// goes on from memory (its acks and deliveries no longer reach the disk, so
// after a restart it may be delivered again: at least once). A restart
// replays what reached the disk, skipping a torn tail; when the disk has no
// room for the start's snapshot the start goes on from the files it found.
// A snapshot is written whole or not at all (a temporary file, fsynced,
// renamed, removed when a write fails).

// The data directory's log: a write-ahead log of the broker's own, in
// numbered segment files (wal-<n>.log), and a snapshot (snap-<n>) that holds
// the state the segments up to n left. Why not bbolt or pebble: the broker
// keeps its queues in memory anyway and only needs the disk to rebuild them
// after a restart, so an append-only log is the whole job. A queue message's
// life is three small appends (put, delivery, settle) in one sequential file,
// batched across every channel into one write and one fsync (group commit),
// where a B+tree (bbolt) would rewrite pages and fsync per transaction, and an
// LSM (pebble) would add its own write-ahead log, memtables and compactions
// under ours; neither is in go.mod today.
//
// A record is an 8-byte header, the body's length and its CRC-32C
// (Castagnoli), both little endian, then the body: a type byte and the
// payload. Reading stops at the first record that is short, too long or
// fails its CRC: the torn tail of a segment being written when the process
// died. Nothing written after it in that segment was answered (a record is
// acknowledged only once fsynced, and records are written in order), so it is
// skipped. A new segment is started at each open, so a torn tail is never
// appended to. A header of zeros ends a segment without a tear: the rest of
// a segment zero-filled ahead of need (wal.prepare).
//
// fsync policy (the bar is KubeMQ's, whose NATS Streaming file store syncs
// each flush): every send, ack, nack, requeue, ack-all and events store send
// is answered after its records are written and fsynced. One writer goroutine
// does the writes: it takes everything appended since its last write, writes
// it and fsyncs once, so concurrent callers share one fsync (group commit).
// A stream's requests are concurrent callers too: its handler reads the next
// request while the previous one's answer waits for the disk (answerer), so
// a client that sends without waiting for each answer (inferq's results on
// one events store stream) gets one fsync per group, not per request.
// Deliveries (a receive count going up, a stranded or released message) are
// logged but not waited for: they reach the disk with the next write (within
// walLazyWrite), and losing one only makes a receive count lower after a
// crash. The fsync is an fdatasync of a segment zero-filled ahead (wal.write).

// The legacy per-message queue stream, StreamQueueMessage (the only stream
// receive of kubemq-js 1.x, the Java v1 and C# v1 SDKs, and kubemq-go's
// StreamQueueMessage): one stream receives one message and holds it under
// a server-side visibility timer until the client settles it. It follows
// the real broker's QueueClient.StreamQueueMessage (pkg/client/queue.go of
// KubeMQ v2.4.0):
//
//   - every request is checked first (client id, then per type); a refused
//     request gets an error response and the stream goes on;
//   - type 1 (receive) waits WaitTimeSeconds (default 1) for a message;
//     none: "Error 138: ..." and the stream ends. A message is delivered
//     with its ReceiveCount raised and held for VisibilitySeconds (default
//     60); a second receive on the stream gets Error 128;
//   - type 2 (ack) and 3 (reject) name the held message by RefSequence; a
//     reject sends it back to the tail of its queue, or past its
//     MaxReceiveCount to its dead letter queue (or nowhere); type 5 resends
//     a copy to another channel (receive count starting again), type 6
//     sends ModifiedMessage in place of the held one; each settles the
//     message, answers, and ends the stream;
//   - type 4 sets the visibility timer to VisibilitySeconds from now, with
//     or without a message held; when the timer fires the stream gets
//     "Error 129: ..." and ends, and the held message goes back as a
//     reject does (a receive counted);
//   - a stream that ends with a message held (the client cancels or goes
//     away) gives it back the same way: counted as a receive, unlike the
//     queues_stream poll.
//
// One difference on purpose: the message is delivered in a response that
// echoes the receive request (its RequestID and type 1). The real broker
// echoes the stream's latest request, which is the receive unless the
// client sent something else while waiting; it also starts the visibility
// timer from that latest request's VisibilitySeconds, so an ack sent early
// (refused, no message yet) makes it 0 and the message expires at once.
// Here the timer uses the latest receive or type 4 request's value.

// Stranding (KUBEMQ.md trap 13), reproduced because clients must be built
// around it. On KubeMQ a poll's transaction is a NATS Streaming queue
// subscription whose room is the batch it asked for, and it stays open until
// every message of the batch is settled. A poll that came back short keeps
// the rest of that room; settling part of the batch makes more, and the
// broker pushes the next messages of the queue there, where no poll or
// peek sees them, until the batch completes or its client closes. The
// final settlement frees room just before the subscription closes too:
// what is pushed in that window, and what the batch had
// stranded, moves to another open transaction of the queue when there is
// one, and waits there until that one completes (up to that transaction's
// size; the rest goes back to the queue). With no other transaction open it
// goes back to the head of the queue at once, as the group's shadow on
// KubeMQ (fact 45): the next stream poll is forced to take all of it, and
// what it did not ask for stays stranded in its transaction (q.shadow).
// The final settlement's room is filled from the queue whether or not
// another transaction is open.
//
// Stranded messages are not deliveries: their receive counts stay, and
// QueuesInfo counts them in Waiting, like the delivered and unsettled
// messages they are on KubeMQ. q.mu guards every field used here, and the
// transactions' free and stranded.
