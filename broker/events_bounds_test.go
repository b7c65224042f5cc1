package broker

import (
	"testing"
	"time"

	pb "github.com/kubemq-io/protobuf/go"
)

// The events store's bounds drop the oldest events past the retention, the
// count or the bytes, and always keep the newest event.
func TestEventBoundsDrop(t *testing.T) {
	now := time.Unix(1000, 0)
	ev := func(age time.Duration, size int) *pb.EventReceive {
		return &pb.EventReceive{Timestamp: now.Add(-age).UnixNano(), Body: make([]byte, size)}
	}
	for _, tc := range []struct {
		name   string
		bounds eventBounds
		events []*pb.EventReceive
		want   int
	}{
		{"within", eventBounds{retention: time.Hour, maxEvents: 3, maxBytes: 30}, []*pb.EventReceive{ev(0, 10), ev(0, 10), ev(0, 10)}, 0},
		{"retention", eventBounds{retention: time.Hour}, []*pb.EventReceive{ev(2*time.Hour, 1), ev(90*time.Minute, 1), ev(time.Minute, 1)}, 2},
		{"count", eventBounds{maxEvents: 2}, []*pb.EventReceive{ev(0, 1), ev(0, 1), ev(0, 1), ev(0, 1)}, 2},
		{"bytes", eventBounds{maxBytes: 25}, []*pb.EventReceive{ev(0, 10), ev(0, 10), ev(0, 10)}, 1},
		{"newest kept however big", eventBounds{maxBytes: 5}, []*pb.EventReceive{ev(0, 10), ev(0, 10)}, 1},
		{"no bounds", eventBounds{maxEvents: -1, maxBytes: -1}, []*pb.EventReceive{ev(0, 10), ev(0, 10)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var bytes int64
			for _, e := range tc.events {
				bytes += eventBytes(e)
			}
			got := tc.bounds.drop(len(tc.events), bytes, now, func(i int) *pb.EventReceive { return tc.events[i] })
			if got != tc.want {
				t.Errorf("drop = %d, want %d", got, tc.want)
			}
		})
	}
}

// An events store channel without a data dir keeps its count bound: the
// oldest go, subscribers asking for them start at the oldest kept.
func TestEventsStoreCountBoundInMemory(t *testing.T) {
	s := New(Options{EventsStoreMaxEvents: 3})
	defer s.Close()
	psSend(t, s, "es", true, "1", "2", "3", "4", "5")
	c := s.pubsub.storeChannel("es")
	c.mu.Lock()
	first, n := c.first, len(c.log)
	c.mu.Unlock()
	if first != 3 || n != 3 {
		t.Errorf("kept %d events from sequence %d, want 3 from 3", n, first)
	}
}
