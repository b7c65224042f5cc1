package broker_test

// Tests of Options.DataDir: what a broker reopened on a data dir has back.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	pb "github.com/kubemq-io/protobuf/go"
)

// openData opens a broker on dir with fastOpts (and mod) and starts it; the
// test's end closes it.
func openData(t *testing.T, dir string, mod func(*broker.Options)) (*broker.Server, pb.KubemqClient) {
	t.Helper()
	opts := fastOpts
	opts.DataDir = dir
	if mod != nil {
		mod(&opts)
	}
	srv, err := broker.Open(opts)
	if err != nil {
		t.Fatalf("open data dir: %v", err)
	}
	t.Cleanup(func() { srv.Close() })
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatalf("start: %v", err)
	}
	return srv, rawClient(t, srv.Addr())
}

// sendPolicy sends one message with a policy.
func sendPolicy(t *testing.T, c pb.KubemqClient, ch, body string, p *pb.QueueMessagePolicy) {
	t.Helper()
	res, err := c.SendQueueMessage(context.Background(), &pb.QueueMessage{ClientID: "raw", Channel: ch, Body: []byte(body), Policy: p})
	if err != nil || res.IsError {
		t.Fatalf("send %s: %v %v", body, err, res)
	}
}

// settle sends one settlement request on d and waits until the broker
// has carried it out (a partial settlement has no answer: a status request
// behind it has).
func settle(d *downstream, typ pb.QueuesDownstreamRequestType, tx string, seqs ...int64) {
	d.t.Helper()
	d.send(&pb.QueuesDownstreamRequest{RequestID: "s", RequestTypeData: typ, RefTransactionId: tx, SequenceRange: seqs})
	d.send(&pb.QueuesDownstreamRequest{RequestID: "sync", RequestTypeData: pb.QueuesDownstreamRequestType_ActiveOffsets, RefTransactionId: tx})
	for d.recv().RefRequestId != "sync" {
	}
}

func waitingBodies(srv *broker.Server, ch string) []string {
	var out []string
	for _, m := range srv.QueueSnapshot(ch).Waiting {
		out = append(out, string(m.Body))
	}
	return out
}

func receiveCounts(srv *broker.Server, ch string) []int32 {
	var out []int32
	for _, m := range srv.QueueSnapshot(ch).Waiting {
		out = append(out, m.Attributes.ReceiveCount)
	}
	return out
}

// TestDataDirReplay: a broker closed and opened again on its data dir has
// each queue as it was, but for what was delivered and not settled, which
// is back (at least once).
func TestDataDirReplay(t *testing.T) {
	t.Parallel()
	const ch = "q"
	cases := []struct {
		name   string
		before func(t *testing.T, srv *broker.Server, c pb.KubemqClient, d *downstream)
		after  func(t *testing.T, srv *broker.Server, c pb.KubemqClient)
	}{{
		name: "sent messages come back in order",
		before: func(t *testing.T, _ *broker.Server, c pb.KubemqClient, _ *downstream) {
			rawSend(t, c, ch, "a", "b", "c")
		},
		after: func(t *testing.T, srv *broker.Server, _ pb.KubemqClient) {
			if got := waitingBodies(srv, ch); !slices.Equal(got, []string{"a", "b", "c"}) {
				t.Errorf("waiting = %v, want [a b c]", got)
			}
		},
	}, {
		// Close ends the stream, which releases b: a disconnect is not a
		// receive (after a crash the count stays: TestDataDirSIGKILL).
		name: "acked messages stay gone, unacked deliveries come back",
		before: func(t *testing.T, _ *broker.Server, c pb.KubemqClient, d *downstream) {
			rawSend(t, c, ch, "a", "b", "c", "d")
			r := d.get(ch, 3, 0)
			settle(d, pb.QueuesDownstreamRequestType_AckRange, r.TransactionId, int64(r.Messages[0].Attributes.Sequence), int64(r.Messages[2].Attributes.Sequence))
		},
		after: func(t *testing.T, srv *broker.Server, _ pb.KubemqClient) {
			if got := waitingBodies(srv, ch); !slices.Equal(got, []string{"b", "d"}) {
				t.Errorf("waiting = %v, want [b d]", got)
			}
			if got := receiveCounts(srv, ch); !slices.Equal(got, []int32{0, 0}) {
				t.Errorf("receive counts = %v, want [0 0]", got)
			}
		},
	}, {
		name: "nack keeps its receive count and the tail",
		before: func(t *testing.T, _ *broker.Server, c pb.KubemqClient, d *downstream) {
			rawSend(t, c, ch, "a", "b")
			r := d.get(ch, 1, 0)
			settle(d, pb.QueuesDownstreamRequestType_NAckAll, r.TransactionId)
			r = d.get(ch, 2, 0) // b, then a again
			settle(d, pb.QueuesDownstreamRequestType_NAckRange, r.TransactionId, int64(r.Messages[1].Attributes.Sequence))
			settle(d, pb.QueuesDownstreamRequestType_AckAll, r.TransactionId)
		},
		after: func(t *testing.T, srv *broker.Server, _ pb.KubemqClient) {
			if got, counts := waitingBodies(srv, ch), receiveCounts(srv, ch); !slices.Equal(got, []string{"a"}) || !slices.Equal(counts, []int32{2}) {
				t.Errorf("waiting = %v with counts %v, want [a] with [2]", got, counts)
			}
		},
	}, {
		name: "a message past its receive limit is in its dead letter queue",
		before: func(t *testing.T, _ *broker.Server, c pb.KubemqClient, d *downstream) {
			sendPolicy(t, c, ch, "poison", &pb.QueueMessagePolicy{MaxReceiveCount: 1, MaxReceiveQueue: "dlq"})
			rawSend(t, c, ch, "fine")
			r := d.get(ch, 1, 0)
			settle(d, pb.QueuesDownstreamRequestType_NAckAll, r.TransactionId)
		},
		after: func(t *testing.T, srv *broker.Server, _ pb.KubemqClient) {
			if got := waitingBodies(srv, ch); !slices.Equal(got, []string{"fine"}) {
				t.Errorf("waiting = %v, want [fine]", got)
			}
			dlq := srv.QueueSnapshot("dlq").Waiting
			if len(dlq) != 1 || string(dlq[0].Body) != "poison" || !dlq[0].Attributes.ReRouted || dlq[0].Attributes.ReRoutedFromQueue != ch {
				t.Errorf("dead letter queue = %v, want poison re-routed from %s", dlq, ch)
			}
		},
	}, {
		name: "requeue moves to the other channel",
		before: func(t *testing.T, _ *broker.Server, c pb.KubemqClient, d *downstream) {
			rawSend(t, c, ch, "a", "b")
			r := d.get(ch, 1, 0)
			d.send(&pb.QueuesDownstreamRequest{RequestID: "rq", RequestTypeData: pb.QueuesDownstreamRequestType_ReQueueAll, RefTransactionId: r.TransactionId, ReQueueChannel: "other"})
			if r := d.recv(); r.IsError {
				t.Fatalf("requeue: %v", r)
			}
		},
		after: func(t *testing.T, srv *broker.Server, _ pb.KubemqClient) {
			if a, b := waitingBodies(srv, ch), waitingBodies(srv, "other"); !slices.Equal(a, []string{"b"}) || !slices.Equal(b, []string{"a"}) {
				t.Errorf("waiting = %v and other = %v, want [b] and [a]", a, b)
			}
		},
	}, {
		name: "consumed, purged and expired messages stay gone; delayed ones wait",
		before: func(t *testing.T, _ *broker.Server, c pb.KubemqClient, _ *downstream) {
			rawSend(t, c, ch, "consumed")
			res, err := c.ReceiveQueueMessages(context.Background(), &pb.ReceiveQueueMessagesRequest{ClientID: "raw", Channel: ch, MaxNumberOfMessages: 1, WaitTimeSeconds: 1})
			if err != nil || len(res.Messages) != 1 {
				t.Fatalf("receive: %v %v", err, res)
			}
			rawSend(t, c, "purged", "x", "y")
			if _, err := c.AckAllQueueMessages(context.Background(), &pb.AckAllQueueMessagesRequest{ClientID: "raw", Channel: "purged", WaitTimeSeconds: 1}); err != nil {
				t.Fatal(err)
			}
			sendPolicy(t, c, ch, "expires", &pb.QueueMessagePolicy{ExpirationSeconds: 1}) // 10 ms
			sendPolicy(t, c, ch, "delayed", &pb.QueueMessagePolicy{DelaySeconds: 2000})   // 20 s
			time.Sleep(30 * time.Millisecond)
		},
		after: func(t *testing.T, srv *broker.Server, c pb.KubemqClient) {
			res, err := c.ReceiveQueueMessages(context.Background(), &pb.ReceiveQueueMessagesRequest{ClientID: "raw", Channel: ch, MaxNumberOfMessages: 5, WaitTimeSeconds: 1, IsPeak: true})
			if err != nil || len(res.Messages) != 0 {
				t.Errorf("peek = %v %v, want nothing ready", err, res)
			}
			if got := waitingBodies(srv, "purged"); len(got) != 0 {
				t.Errorf("purged = %v, want nothing", got)
			}
			if d := srv.QueueSnapshot(ch).Delayed; len(d) != 1 || string(d[0].Body) != "delayed" {
				t.Errorf("delayed = %v, want the delayed message", d)
			}
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			srv, c := openData(t, dir, nil)
			tc.before(t, srv, c, openDownstream(t, c))
			if err := srv.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			srv, c = openData(t, dir, nil)
			tc.after(t, srv, c)
		})
	}
}

// TestDataDirEventsStoreSequencesContinue: events store events are kept,
// and numbering goes on after a restart.
func TestDataDirEventsStoreSequencesContinue(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv, _ := openData(t, dir, nil)
	sendEvents(t, srv, "es", "1", "2", "3")
	srv.Close()
	srv, c := openData(t, dir, nil)
	sendEvents(t, srv, "es", "4")
	got := subscribeFirst(t, c, "es", 4)
	for i, e := range got {
		if e.Sequence != uint64(i+1) || string(e.Body) != fmt.Sprint(i+1) {
			t.Errorf("event %d = seq %d body %q, want %d", i, e.Sequence, e.Body, i+1)
		}
	}
}

// TestDataDirEventsStoreBounded: the count bound drops the oldest events,
// in memory and on disk.
func TestDataDirEventsStoreBounded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bound := func(o *broker.Options) { o.EventsStoreMaxEvents = 2 }
	srv, c := openData(t, dir, bound)
	sendEvents(t, srv, "es", "1", "2", "3")
	if got := subscribeFirst(t, c, "es", 2); got[0].Sequence != 2 || got[1].Sequence != 3 {
		t.Errorf("in memory: %v, want sequences 2 and 3", got)
	}
	srv.Close()
	srv, c = openData(t, dir, bound)
	sendEvents(t, srv, "es", "4")
	if got := subscribeFirst(t, c, "es", 2); got[0].Sequence != 3 || got[1].Sequence != 4 {
		t.Errorf("after restart: %v, want sequences 3 and 4", got)
	}
}

func sendEvents(t *testing.T, srv *broker.Server, ch string, bodies ...string) {
	t.Helper()
	for _, b := range bodies {
		if _, err := srv.SendEvent(context.Background(), &pb.Event{ClientID: "c", Channel: ch, Body: []byte(b), Store: true}); err != nil {
			t.Fatalf("send event: %v", err)
		}
	}
}

// subscribeFirst reads n events from ch's first kept one, and checks no
// more come within a short wait.
func subscribeFirst(t *testing.T, c pb.KubemqClient, ch string, n int) []*pb.EventReceive {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.SubscribeToEvents(ctx, &pb.Subscribe{SubscribeTypeData: pb.Subscribe_EventsStore, ClientID: "sub", Channel: ch, EventsStoreTypeData: pb.Subscribe_StartFromFirst})
	if err != nil {
		t.Fatal(err)
	}
	var out []*pb.EventReceive
	for len(out) < n {
		e, err := s.Recv()
		if err != nil {
			t.Fatalf("after %d events: %v", len(out), err)
		}
		out = append(out, e)
	}
	return out
}

// TestDataDirTornTail: a record cut short at the end of the log (a crash
// mid-write) is skipped, and what came before it is kept.
func TestDataDirTornTail(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		tear func(data []byte) []byte
		want []string
	}{
		{"cut", func(d []byte) []byte { return d[:len(d)-3] }, []string{"a", "b"}},
		{"garbage", func(d []byte) []byte { return append(d, 0x10, 0, 0, 0, 1, 2, 3, 4, 5) }, []string{"a", "b", "c"}},
		{"flipped", func(d []byte) []byte { d[len(d)-1] ^= 0xff; return d }, []string{"a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			srv, c := openData(t, dir, nil)
			rawSend(t, c, ch1, "a")
			rawSend(t, c, ch1, "b")
			rawSend(t, c, ch1, "c")
			srv.Close()
			segs, _ := filepath.Glob(filepath.Join(dir, "wal-*.log"))
			if len(segs) != 1 {
				t.Fatalf("segments = %v, want one", segs)
			}
			data, err := os.ReadFile(segs[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(segs[0], tc.tear(data), 0o600); err != nil {
				t.Fatal(err)
			}
			srv, _ = openData(t, dir, nil)
			if got := waitingBodies(srv, ch1); !slices.Equal(got, tc.want) {
				t.Errorf("waiting = %v, want %v", got, tc.want)
			}
		})
	}
}

const ch1 = "q1"

// TestDataDirCompaction: full segments are compacted into a snapshot while
// the broker runs, and a restart reads it.
func TestDataDirCompaction(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	small := func(o *broker.Options) { o.SegmentBytes = 2048 }
	srv, c := openData(t, dir, small)
	d := openDownstream(t, c)
	var want []string
	for i := range 200 {
		b := fmt.Sprintf("m%03d", i)
		rawSend(t, c, ch1, b)
		if i%2 == 1 {
			want = append(want, b)
		}
	}
	r := d.get(ch1, 200, 0)
	var seqs []int64
	for i, m := range r.Messages {
		if i%2 == 0 {
			seqs = append(seqs, int64(m.Attributes.Sequence))
		}
	}
	settle(d, pb.QueuesDownstreamRequestType_AckRange, r.TransactionId, seqs...)
	waitFor(t, 5*time.Second, "a snapshot", func() bool {
		snaps, _ := filepath.Glob(filepath.Join(dir, "snap-*"))
		return len(snaps) > 0 && !strings.HasSuffix(snaps[0], ".tmp")
	})
	srv.Close()
	segs, _ := filepath.Glob(filepath.Join(dir, "wal-*.log"))
	if len(segs) > 3 {
		t.Errorf("%d segments left after compaction", len(segs))
	}
	srv, _ = openData(t, dir, small)
	if got := waitingBodies(srv, ch1); !slices.Equal(got, want) {
		t.Errorf("waiting = %v, want %v", got, want)
	}
}

// TestDataDirLocked: a second broker on a data dir in use is refused.
func TestDataDirLocked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	openData(t, dir, nil)
	if _, err := broker.Open(broker.Options{DataDir: dir}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("second open = %v, want in use", err)
	}
}

// TestDataDirSIGKILL is the acceptance test of the data dir: 10k messages
// sent to a broker process that is then killed with SIGKILL are all there
// when a new process opens the dir; after a second kill, with 4k of them
// acked and 6k delivered and not settled, the 6k come back (with their
// receive count) and the acked ones do not.
func TestDataDirSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts broker processes")
	}
	t.Parallel()
	const (
		ch    = "kill.q"
		total = 10000
		acked = 4000
	)
	dir := t.TempDir()
	c, kill := startBrokerProcess(t, dir)
	for i := 0; i < total; i += 500 {
		bodies := make([]string, 500)
		for j := range bodies {
			bodies[j] = fmt.Sprintf("m%05d", i+j)
		}
		rawSend(t, c, ch, bodies...)
	}
	kill()

	c, kill = startBrokerProcess(t, dir)
	d := openDownstream(t, c)
	r := d.get(ch, total, 0)
	checkBodies(t, "after the first kill", r.Messages, 0, total, 1)
	var seqs []int64
	for _, m := range r.Messages[:acked] {
		seqs = append(seqs, int64(m.Attributes.Sequence))
	}
	settle(d, pb.QueuesDownstreamRequestType_AckRange, r.TransactionId, seqs...)
	kill()

	c, _ = startBrokerProcess(t, dir)
	d = openDownstream(t, c)
	r = d.get(ch, total, 0)
	checkBodies(t, "after the second kill", r.Messages, acked, total, 2)
}

// checkBodies checks that msgs are m<from>..m<to-1>, in order, each with
// receive count recv.
func checkBodies(t *testing.T, when string, msgs []*pb.QueueMessage, from, to int, recv int32) {
	t.Helper()
	if len(msgs) != to-from {
		t.Fatalf("%s: got %d messages, want %d", when, len(msgs), to-from)
	}
	for i, m := range msgs {
		if want := fmt.Sprintf("m%05d", from+i); string(m.Body) != want || m.Attributes.ReceiveCount != recv {
			t.Fatalf("%s: message %d = %s with receive count %d, want %s with %d", when, i, m.Body, m.Attributes.ReceiveCount, want, recv)
		}
	}
}

const helperDirEnv = "INFERQ_BROKER_HELPER_DATA_DIR"

// startBrokerProcess runs a broker on dir in a process of its own (this
// test binary, running TestDataDirHelperProcess) and returns a client of it
// and a function that kills it with SIGKILL.
func startBrokerProcess(t *testing.T, dir string) (pb.KubemqClient, func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDataDirHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperDirEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start broker process: %v", err)
	}
	var once sync.Once
	kill := func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
		})
	}
	t.Cleanup(kill)
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		if addr, ok := strings.CutPrefix(lines.Text(), "ADDR "); ok {
			go func() { _, _ = io.Copy(io.Discard, out) }()
			return rawClient(t, addr), kill
		}
	}
	t.Fatalf("broker process ended without an address: %v", lines.Err())
	return nil, nil
}

// TestDataDirHelperProcess is the broker process of TestDataDirSIGKILL; run
// directly it skips. It serves until killed, or exits after two minutes so
// that it never outlives a test run that died.
func TestDataDirHelperProcess(t *testing.T) {
	dir := os.Getenv(helperDirEnv)
	if dir == "" {
		t.Skip("the broker process of TestDataDirSIGKILL")
	}
	srv, err := broker.Open(broker.Options{DataDir: dir, PollWaitFloor: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatalf("start: %v", err)
	}
	fmt.Printf("ADDR %s\n", srv.Addr())
	time.Sleep(2 * time.Minute)
	os.Exit(1)
}

// TestQueueConformanceWithDataDir runs the queue conformance rows on an
// embedded broker with a data dir (INFERQ_BROKER_TEST_DATA_DIR=1 runs every
// conformance test so).
func TestQueueConformanceWithDataDir(t *testing.T) {
	t.Parallel()
	srv, _ := openData(t, t.TempDir(), func(o *broker.Options) { *o = broker.Options{DataDir: o.DataDir} })
	tg := &target{Name: "embedded-data-dir", Addr: srv.Addr(), Embedded: srv}
	n := 0
	for _, r := range queueRows {
		n += r.clients
	}
	e := &queueEnv{tg: tg, warm: warmStreams(t, tg, n)}
	for _, r := range queueRows {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			r.run(t, e)
		})
	}
}
