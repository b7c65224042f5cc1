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
