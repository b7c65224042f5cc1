package broker_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	pb "github.com/kubemq-io/protobuf/go"
)

// TestDataDirStreamsShareFsyncs (issue 25 item 7): requests sent one after
// the other on one stream, without waiting for their answers, share the
// data dir's fsyncs: the broker reads a stream's next request while the
// previous one waits for the disk, instead of one fsync per request (2,129
// tasks/s where memory did 13,748). Each fsync of the log takes 5 ms here.
func TestDataDirStreamsShareFsyncs(t *testing.T) {
	t.Parallel()
	const n, most = 64, 16
	open := func(t *testing.T) (pb.KubemqClient, *atomic.Int64) {
		var syncs atomic.Int64
		_, c := openData(t, t.TempDir(), func(o *broker.Options) {
			broker.SetDiskFault(o, func(op, path string) error {
				if op == "sync" && strings.HasPrefix(filepath.Base(path), "wal-") {
					syncs.Add(1)
					time.Sleep(5 * time.Millisecond)
				}
				return nil
			})
		})
		return c, &syncs
	}
	check := func(t *testing.T, what string, syncs *atomic.Int64) {
		t.Helper()
		if got := syncs.Load(); got > most {
			t.Errorf("%d %s on one stream took %d fsyncs, want at most %d", n, what, got, most)
		}
	}
	ctx := context.Background()

	t.Run("events store", func(t *testing.T) {
		t.Parallel()
		c, syncs := open(t)
		s, err := c.SendEventsStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if err := s.Send(&pb.Event{EventID: fmt.Sprint(i), ClientID: "raw", Channel: "results", Body: []byte("r"), Store: true}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range n {
			res, err := s.Recv()
			if err != nil || !res.Sent || res.EventID != fmt.Sprint(i) {
				t.Fatalf("result %d: %v %+v", i, err, res)
			}
		}
		check(t, "events store sends", syncs)
	})

	t.Run("upstream", func(t *testing.T) {
		t.Parallel()
		c, syncs := open(t)
		s, err := c.QueuesUpstream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if err := s.Send(&pb.QueuesUpstreamRequest{RequestID: fmt.Sprint(i),
				Messages: []*pb.QueueMessage{{ClientID: "raw", Channel: ch1, Body: []byte(fmt.Sprint(i))}}}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range n {
			res, err := s.Recv()
			if err != nil || res.IsError || res.RefRequestID != fmt.Sprint(i) || res.Results[0].IsError {
				t.Fatalf("result %d: %v %+v", i, err, res)
			}
		}
		check(t, "queue sends", syncs)
	})

	t.Run("downstream", func(t *testing.T) {
		t.Parallel()
		c, syncs := open(t)
		bodies := make([]string, n)
		for i := range bodies {
			bodies[i] = fmt.Sprint(i)
		}
		rawSend(t, c, ch1, bodies...)
		d := openDownstream(t, c)
		r := d.get(ch1, n, 0)
		if len(r.Messages) != n {
			t.Fatalf("polled %d messages, want %d", len(r.Messages), n)
		}
		syncs.Store(0)
		for _, m := range r.Messages {
			d.send(&pb.QueuesDownstreamRequest{RequestID: "ack", RequestTypeData: pb.QueuesDownstreamRequestType_AckRange,
				RefTransactionId: r.TransactionId, SequenceRange: []int64{int64(m.Attributes.Sequence)}})
		}
		if a := d.recv(); a.IsError || !a.TransactionComplete {
			t.Fatalf("last ack: %+v", a)
		}
		check(t, "acks", syncs)
	})
}
