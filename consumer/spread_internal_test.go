package consumer

import (
	"testing"

	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/task"
)

// choose, without a broker: the least loaded replica's least loaded shard,
// never shard 0, and none when that replica has no room.
func TestChoose(t *testing.T) {
	for _, tc := range []struct {
		name    string
		waiting []int64
		owner   []int
		n, room int64
		want    int
	}{
		{"empty fleet of two: the first shard", []int64{50, 0, 0, 0}, []int{0, 1, 0, 1}, 10, 100, 1},
		{"replica 1 busier: replica 0's shard", []int64{0, 40, 0, 30}, []int{0, 1, 0, 1}, 10, 100, 2},
		{"replica 0 busier: replica 1's emptier shard", []int64{0, 20, 60, 5}, []int{0, 1, 0, 1}, 10, 100, 3},
		{"no room anywhere", []int64{0, 95, 95, 0}, []int{0, 1, 0, 1}, 10, 100, 0},
		{"room for exactly n", []int64{0, 90, 95, 0}, []int{0, 1, 0, 1}, 10, 100, 3},
		{"shard 0 alone is no target", []int64{0}, []int{0}, 1, 100, 0},
		{"owners not known yet", []int64{0, 0}, nil, 1, 100, 0},
		{"three replicas, one shard each", []int64{0, 30, 10, 20}, []int{0, 1, 2, 0}, 5, 100, 2},
	} {
		if got := choose(tc.waiting, tc.owner, tc.n, tc.room); got != tc.want {
			t.Errorf("%s: choose(%v, %v, %d, %d) = %d, want %d", tc.name, tc.waiting, tc.owner, tc.n, tc.room, got, tc.want)
		}
	}
}

// The copy a move sends keeps the task and its policy, and carries the
// attempt the message was at.
func TestMovedCarriesAttempts(t *testing.T) {
	for _, tc := range []struct {
		tag       string
		receives  int
		wantTag   string
		wantLimit int
	}{
		{"", 1, "1", 5},
		{"", 3, "3", 5},
		{"2", 1, "2", 5},
		{"2", 2, "3", 5},
		{"junk", 1, "1", 5},
	} {
		m := &mq.Message{ID: "m", Channel: "q", Body: []byte("body"), Metadata: "meta", ReceiveCount: tc.receives,
			MaxReceiveCount: 5, MaxReceiveQueue: "dlq", Tags: map[string]string{"task_id": "t1"}}
		if tc.tag != "" {
			m.Tags[task.TagAttempt] = tc.tag
		}
		out := moved(m, "q.shard-2")
		if out.Channel != "q.shard-2" || string(out.Body) != "body" || out.Metadata != "meta" || out.Tags["task_id"] != "t1" {
			t.Errorf("copy %+v does not keep the message", out)
		}
		if out.Tags[task.TagAttempt] != tc.wantTag || out.MaxReceiveCount != tc.wantLimit || out.MaxReceiveQueue != "dlq" {
			t.Errorf("tag %q, %d receives: copy attempt %q, policy %d %q; want %q, %d \"dlq\"",
				tc.tag, tc.receives, out.Tags[task.TagAttempt], out.MaxReceiveCount, out.MaxReceiveQueue, tc.wantTag, tc.wantLimit)
		}
		if m.Tags[task.TagAttempt] != tc.tag {
			t.Errorf("moved changed the original's tags: %v", m.Tags)
		}
	}
}
