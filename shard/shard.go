// Package shard spreads one logical queue over several KubeMQ queue
// channels, each consumed by one replica at a time.
//
// On KubeMQ every poll and peek of a queue channel is a member of the
// channel's one NATS Streaming queue group, and the members of several
// consumers strand each other's messages (KUBEMQ.md traps 12, 13): two or
// three replicas on one channel do fewer tasks per second than one. With
// shards, producers that know the count spread tasks over the channels
// (Pick), every replica learns the others from heartbeats (Members), and
// each shard is polled by the one replica that owns it (Owned). Shard 0 is
// the queue's own name, so a producer that knows nothing of shards (the
// Python adapter's) keeps working: its tasks go to shard 0's owner.
package shard

import (
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
)

// Max is the most shards a queue may have.
const Max = 256

// Channel is shard i's channel of queue: the queue itself for shard 0,
// else queue + ".shard-" + i.
func Channel(queue string, i int) string {
	if i == 0 {
		return queue
	}
	return queue + ".shard-" + strconv.Itoa(i)
}

// Channels are the n shard channels of queue, shard 0 first.
func Channels(queue string, n int) []string {
	out := make([]string, max(n, 1))
	for i := range out {
		out[i] = Channel(queue, i)
	}
	return out
}

// Pick is the shard of n that key (a task id) goes to: FNV-1a, so every
// producer picks the same one for the same key.
func Pick(key string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// ForFleet is the shard count the docs tell a fleet operator to set
// (serve --queue-shards) for up to replicas replicas: 8, or replicas + 1
// when more. Shard 0's owner moves what producers that know no shards send
// to the other shards (consumer's spreading), so a fleet needs at least
// one shard more than replicas; a few more let a replica that owns several
// run batches of each side by side.
func ForFleet(replicas int) int { return min(max(8, replicas+1), Max) }

// Validate checks a shard count from configuration.
func Validate(n int) error {
	if n < 1 || n > Max {
		return fmt.Errorf("queue shards %d out of range [1, %d]", n, Max)
	}
	return nil
}

// Owned are the shards of n that member self owns among members (the
// live ones, self included or not): the members sorted, shard i belongs
// to member i mod len(members). Every replica that sees the same members
// computes the same owners, so each shard has one. Nil when self is not
// a member (not yet known to itself) or members is empty.
func Owned(self string, members []string, n int) []int {
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	k := slices.Index(ms, self)
	if k < 0 {
		return nil
	}
	var out []int
	for i := range max(n, 1) {
		if i%len(ms) == k {
			out = append(out, i)
		}
	}
	return out
}

// errBadID is a malformed member id.
var errBadID = errors.New("shard: member id must be 1-64 characters of [A-Za-z0-9_-]")

// validID checks a member id read from the wire.
func validID(id string) error {
	if len(id) == 0 || len(id) > 64 {
		return errBadID
	}
	for _, c := range []byte(id) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return errBadID
		}
	}
	return nil
}
