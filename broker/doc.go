// Package broker is an in-process server of the subset of the KubeMQ gRPC
// protocol that github.com/kubemq-io/kubemq-go v1.9.0 uses: queue streams
// (send, poll, ack, nack, requeue, ack-all), the legacy queue calls, queue
// info, events with groups, events store with replay, queries with groups and
// timeouts, and Ping.
//
// It keeps everything in memory on a single node. It exists so that tests and
// `inferq serve --embedded-broker` can talk real gRPC through the real
// kubemq-go client without an external KubeMQ. It is not durable and not meant
// for production. It reproduces the KubeMQ semantics that clients rely on (see
// shared/KUBEMQ.md in the steering repository), not the real broker's bugs.
package broker
