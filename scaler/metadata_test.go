package scaler

import (
	"errors"
	"slices"
	"testing"
)

func TestParseTarget(t *testing.T) {
	for _, tt := range []struct {
		md   map[string]string
		want Target
	}{
		{map[string]string{"queue": "inferq.mlp", "targetDepth": "256"}, Target{Queues: []string{"inferq.mlp"}, TargetDepth: 256}},
		{map[string]string{"queue": " a , b,a ", "targetDepth": " 1 ", "activationDepth": "4", "scalerAddress": "x:6000"},
			Target{Queues: []string{"a", "b"}, TargetDepth: 1, ActivationDepth: 4}},
		{map[string]string{"queue": "a", "targetDepth": "2", "activationDepth": ""}, Target{Queues: []string{"a"}, TargetDepth: 2}},
		{map[string]string{"queue": "a,b", "targetDepth": "2", "queueShards": "3"},
			Target{Queues: []string{"a", "a.shard-1", "a.shard-2", "b", "b.shard-1", "b.shard-2"}, TargetDepth: 2}},
		{map[string]string{"queue": "a", "targetDepth": "2", "queueShards": "1"}, Target{Queues: []string{"a"}, TargetDepth: 2}},
	} {
		got, err := ParseTarget(tt.md)
		if err != nil || !slices.Equal(got.Queues, tt.want.Queues) || got.TargetDepth != tt.want.TargetDepth || got.ActivationDepth != tt.want.ActivationDepth {
			t.Errorf("ParseTarget(%v) = %+v, %v; want %+v", tt.md, got, err, tt.want)
		}
	}
	_, err := ParseTarget(map[string]string{"queue": "q.", "targetDepth": "1"})
	var me *MetadataError
	if !errors.As(err, &me) || me.Field != KeyQueue {
		t.Errorf("a queue name ending in '.': %v, want a MetadataError on %s", err, KeyQueue)
	}
	for _, bad := range []string{"0", "257", "x"} {
		_, err := ParseTarget(map[string]string{"queue": "q", "targetDepth": "1", "queueShards": bad})
		if !errors.As(err, &me) || me.Field != KeyQueueShards {
			t.Errorf("queueShards %q: %v, want a MetadataError on %s", bad, err, KeyQueueShards)
		}
	}
}
