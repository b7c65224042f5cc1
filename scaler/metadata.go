package scaler

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/inferq/inferq/shard"
)

// The keys of a ScaledObject trigger's metadata that the scaler reads. KEDA
// passes the whole trigger metadata (scalerAddress included) as
// ScaledObjectRef.scalerMetadata; other keys are ignored.
const (
	// KeyQueue names the KubeMQ queue channel(s) to scale on: one name, or
	// several separated by commas, whose depths are summed (the replicas
	// of one Deployment serve all of them).
	KeyQueue = "queue"
	// KeyTargetDepth is the number of waiting tasks one replica should
	// have: KEDA's HPA runs ceil(depth / targetDepth) replicas. Required,
	// a whole number >= 1.
	KeyTargetDepth = "targetDepth"
	// KeyActivationDepth is the depth above which the target is active
	// (scaled up from zero): active when depth > activationDepth.
	// Optional, a whole number >= 0; default 0, so one waiting task wakes
	// the Deployment.
	KeyActivationDepth = "activationDepth"
	// KeyQueueShards is the shard count of the queues (serve
	// --queue-shards): each queue's depth is the sum of its shards'
	// (<queue>, <queue>.shard-1, ...). Optional, 1 to shard.Max;
	// default 1.
	KeyQueueShards = "queueShards"
)

// MetricName is the name of the one metric the scaler reports (KEDA
// prefixes it with the trigger's index, "s0-inferq-queue-depth").
const MetricName = "inferq-queue-depth"

// maxQueueNameLen bounds one queue name, like the config's channel names.
const maxQueueNameLen = 512

// Target is what one ScaledObject asks of the scaler, parsed from its
// scalerMetadata.
type Target struct {
	// Queues are the queue channels whose depths are summed, in the
	// order given, without duplicates.
	Queues []string
	// TargetDepth is the depth per replica (>= 1).
	TargetDepth int64
	// ActivationDepth: the target is active when the depth exceeds it.
	ActivationDepth int64
}

// Active reports whether depth wakes the target: depth > ActivationDepth.
func (t Target) Active(depth int64) bool { return depth > t.ActivationDepth }

// MetadataError is a scalerMetadata field that is missing or invalid. The
// scaler answers it with gRPC InvalidArgument.
type MetadataError struct {
	// Field is the metadata key at fault, e.g. "targetDepth".
	Field string
	// Msg says what is wrong and what is wanted.
	Msg string
}

func (e *MetadataError) Error() string {
	return "scaler: scalerMetadata." + e.Field + ": " + e.Msg
}

// ParseTarget reads a ScaledObject trigger's metadata. Its error is a
// *MetadataError naming the first field at fault.
func ParseTarget(md map[string]string) (Target, error) {
	queues, err := parseQueues(md[KeyQueue])
	if err != nil {
		return Target{}, err
	}
	target, err := parseCount(md, KeyTargetDepth, 1, true)
	if err != nil {
		return Target{}, err
	}
	activation, err := parseCount(md, KeyActivationDepth, 0, false)
	if err != nil {
		return Target{}, err
	}
	shards, err := parseCount(md, KeyQueueShards, 1, false)
	if err != nil {
		return Target{}, err
	}
	if shards > shard.Max {
		return Target{}, &MetadataError{Field: KeyQueueShards, Msg: fmt.Sprintf("%d: at most %d", shards, shard.Max)}
	}
	if shards > 1 {
		var all []string
		for _, q := range queues {
			all = append(all, shard.Channels(q, int(shards))...)
		}
		queues = all
	}
	return Target{Queues: queues, TargetDepth: target, ActivationDepth: activation}, nil
}

// parseQueues splits the queue field on commas and checks each name.
func parseQueues(v string) ([]string, error) {
	if strings.TrimSpace(v) == "" {
		return nil, &MetadataError{Field: KeyQueue, Msg: "is missing: name the KubeMQ queue channel to scale on (several: separated by commas)"}
	}
	var out []string
	for _, q := range strings.Split(v, ",") {
		q = strings.TrimSpace(q)
		if why := checkQueue(q); why != "" {
			return nil, &MetadataError{Field: KeyQueue, Msg: fmt.Sprintf("%q: %s", v, why)}
		}
		if !slices.Contains(out, q) {
			out = append(out, q)
		}
	}
	return out, nil
}

// checkQueue says what is wrong with one queue name, or "". A ';' would
// split the broker's QueuesInfo filter; the rest are names KubeMQ refuses
// (KUBEMQ.md trap 19).
func checkQueue(q string) string {
	switch {
	case q == "":
		return "an empty queue name"
	case len(q) > maxQueueNameLen:
		return fmt.Sprintf("a queue name of %d characters; the limit is %d", len(q), maxQueueNameLen)
	case strings.ContainsAny(q, " \t\r\n*>;"):
		return fmt.Sprintf("queue name %q contains whitespace, a wildcard (* or >) or ';'", q)
	case strings.HasSuffix(q, "."):
		return fmt.Sprintf("queue name %q ends with '.', which KubeMQ refuses", q)
	}
	return ""
}

// parseCount reads a whole number >= low from md[key]; when the key is
// absent it is an error if required, else 0.
func parseCount(md map[string]string, key string, low int64, required bool) (int64, error) {
	v, ok := md[key]
	if !ok || strings.TrimSpace(v) == "" {
		if required {
			return 0, &MetadataError{Field: key, Msg: fmt.Sprintf("is missing: set a whole number >= %d", low)}
		}
		return 0, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < low {
		return 0, &MetadataError{Field: key, Msg: fmt.Sprintf("is %q; want a whole number >= %d", v, low)}
	}
	return n, nil
}
