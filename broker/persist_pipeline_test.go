package broker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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

// TestDataDirZeroFilledSegments: segments are zero-filled ahead of need
// (no metadata to commit at each fsync); a copy of the data dir taken while
// the broker runs (what a kill leaves: the segment being written, partly
// zeros, and the next one, all zeros) opens with every message and no torn
// tail, and a closed broker leaves no unused segment.
func TestDataDirZeroFilledSegments(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const segBytes = 16 << 10
	small := func(o *broker.Options) { o.SegmentBytes = segBytes }
	srv, c := openData(t, dir, small)
	var want []string
	for i := range 50 {
		var bodies []string
		for j := range 10 {
			bodies = append(bodies, fmt.Sprintf("m%03d-%d-%s", i, j, strings.Repeat("x", 100)))
		}
		rawSend(t, c, ch1, bodies...)
		want = append(want, bodies...)
	}
	zeroed := 0
	segs, _ := filepath.Glob(filepath.Join(dir, "wal-*.log"))
	for _, s := range segs {
		if fi, err := os.Stat(s); err == nil && fi.Size() >= segBytes {
			zeroed++
		}
	}
	if zeroed == 0 {
		t.Errorf("no segment of %d bytes or more among %v: none was zero-filled", segBytes, segs)
	}
	crash := t.TempDir()
	copyDir(t, dir, crash)
	srv.Close()
	if after, _ := filepath.Glob(filepath.Join(dir, "wal-*.log")); len(after) > len(segs) {
		t.Errorf("segments after close = %v, before %v: an unused one was left", after, segs)
	}

	var logs strings.Builder
	srv, _ = openData(t, crash, func(o *broker.Options) {
		small(o)
		o.Logger = slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, nil))
	})
	if got := waitingBodies(srv, ch1); !slices.Equal(got, want) {
		t.Errorf("after the crash copy: %d messages waiting, want %d", len(got), len(want))
	}
	if strings.Contains(logs.String(), "torn") && !strings.Contains(logs.String(), "torn_tails_skipped=0") {
		t.Errorf("zeros read as a torn tail:\n%s", logs.String())
	}
}

// copyDir copies the files of src into dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() || e.Name() == "inferq.lock" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// syncWriter serialises writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}
