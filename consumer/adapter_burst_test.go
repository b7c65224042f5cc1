package consumer_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferq/inferq/results"
	"github.com/inferq/inferq/task"
	pb "github.com/kubemq-io/protobuf/go"
)

// The Python adapter's readers peek the oldest message of a task's result
// channel until its status is terminal, so inferq's record must reach the
// head of the channel once the task finishes: the producer's PENDING ahead
// of it must go. This holds under the adapter's bursts (tasks sent one at a
// time and in one SendQueueMessagesBatch, each after its PENDING), right
// after the server starts and on a warm one, while readers peek every
// channel. A PENDING left at the head is read as PENDING until it expires,
// an hour later (docs/KUBEMQ.md, "Per-task result channels").
func TestAdapterBurstResultsReachTheHead(t *testing.T) {
	forBrokers(t, testAdapterBurstResultsReachTheHead)
}

// adapterBurstWithin is how soon after its record is sent a task's result
// channel must show a terminal record at its head.
const adapterBurstWithin = 5 * time.Second

func testAdapterBurstResultsReachTheHead(t *testing.T, on brokerOpt) {
	sent := &sendTimes{at: map[string]time.Time{}}
	h := newHarness(t, on, func(c *harnessConfig) {
		c.brokerWrap = func(b results.Broker) results.Broker { return timedBroker{b, sent} }
	})
	raw := rawClient(t, h.addr)
	run := fmt.Sprintf("%012d", time.Now().UnixNano()%1e12)
	burst := func(name string, n int) {
		t.Helper()
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("%s-%s-%04d", run, name, i)
		}
		start := time.Now()
		var enqueued atomic.Int64
		read := make(chan []string, 1)
		go func() { read <- readAsAdapter(t, raw, ids, &enqueued, sent) }()
		adapterBurst(t, raw, h.q, ids, &enqueued)
		stuck := <-read
		t.Logf("%s: %d tasks, %d one at a time and %d in one batch send; every head read in %v",
			name, n, n/2, n-n/2, time.Since(start).Round(time.Millisecond))
		for _, s := range stuck {
			t.Errorf("%s: %s", name, s)
		}
	}
	// Right after the start, then warm; then again after a restart, the
	// other way round.
	burst("cold50", 50)
	burst("warm500", 500)
	h.stop()
	h.start()
	burst("cold500", 500)
	burst("warm50", 50)
}

// adapterBurst sends tasks the way the Python adapter's enqueue does, each
// after its PENDING record (3600 s expiry, no tags) on its own result
// channel: the first half one at a time (SendQueueMessage for the PENDING,
// then for the task), the second half with every PENDING sent first and the
// tasks in one SendQueueMessagesBatch. enqueued counts the tasks whose
// PENDING is written.
func adapterBurst(t *testing.T, raw pb.KubemqClient, queue string, ids []string, enqueued *atomic.Int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	now := time.Now()
	pending := func(id string) *pb.QueueMessage {
		rec := (&task.Record{TaskID: id, Status: task.StatusPending, CreatedAt: now}).AppendJSON(nil)
		return &pb.QueueMessage{ClientID: "adapter", Channel: adapterChannel(id), Body: rec,
			Policy: &pb.QueueMessagePolicy{ExpirationSeconds: 3600}}
	}
	work := func(id string) *pb.QueueMessage {
		body := `{"task_id":"` + id + `","task_name":"m","args":[[1.5,2,3,4]],"kwargs":{},"created_at":"` + task.FormatTime(now) + `"}`
		return &pb.QueueMessage{ClientID: "adapter", Channel: queue, Body: []byte(body)}
	}
	send := func(m *pb.QueueMessage) {
		res, err := raw.SendQueueMessage(ctx, m)
		if err == nil && res.IsError {
			err = fmt.Errorf("%s", res.Error)
		}
		if err != nil {
			t.Fatalf("send to %s: %v", m.Channel, err)
		}
	}
	half := len(ids) / 2
	for _, id := range ids[:half] {
		send(pending(id))
		enqueued.Add(1)
		send(work(id))
	}
	batch := &pb.QueueMessagesBatchRequest{BatchID: "burst-" + ids[half]}
	for _, id := range ids[half:] {
		send(pending(id))
		enqueued.Add(1)
		batch.Messages = append(batch.Messages, work(id))
	}
	res, err := raw.SendQueueMessagesBatch(ctx, batch)
	if err == nil && res.HaveErrors {
		err = fmt.Errorf("some messages refused: %v", res.Results)
	}
	if err != nil {
		t.Fatalf("batch send of %d tasks: %v", len(batch.Messages), err)
	}
}

func adapterChannel(id string) string { return "rayserve-result-" + id }

// readAsAdapter peeks the oldest message of each task's result channel, as
// the adapter's get_result does (max 1 message), from a pool of readers
// that start with the burst (reading the first enqueued of ids), until each
// shows a terminal record; then it peeks each head once more. It returns a
// line for each task whose head was not terminal within adapterBurstWithin
// of inferq's send of its record, or is no longer. It runs beside the test's
// goroutine: it reports failures as its result, never with t.Fatal.
func readAsAdapter(t *testing.T, raw pb.KubemqClient, ids []string, enqueued *atomic.Int64, sent *sendTimes) []string {
	t.Helper()
	const readers = 16
	peek := func(ch string, max int32) ([]task.Status, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := raw.ReceiveQueueMessages(ctx, &pb.ReceiveQueueMessagesRequest{RequestID: "get-" + ch,
			ClientID: "adapter-reader", Channel: ch, MaxNumberOfMessages: max, WaitTimeSeconds: 1, IsPeak: true})
		if err == nil && resp.IsError {
			err = fmt.Errorf("%s", resp.Error)
		}
		if err != nil {
			return nil, err
		}
		var out []task.Status
		for _, m := range resp.Messages {
			r, err := task.ParseRecord(m.Body)
			if err != nil {
				return nil, fmt.Errorf("unreadable record on %s: %w", ch, err)
			}
			out = append(out, r.Status)
		}
		return out, nil
	}
	seen := make([]time.Time, len(ids))
	var open atomic.Int64
	open.Store(int64(len(ids)))
	give := time.Now().Add(2 * time.Minute)
	var wg sync.WaitGroup
	var failed atomic.Value
	for r := range readers {
		wg.Go(func() {
			for time.Now().Before(give) && open.Load() > 0 && failed.Load() == nil {
				idle := enqueued.Load() == int64(len(ids))
				for i := r; i < int(enqueued.Load()); i += readers {
					if !seen[i].IsZero() {
						continue
					}
					idle = false
					head, err := peek(adapterChannel(ids[i]), 1)
					if err != nil {
						failed.CompareAndSwap(nil, err)
						return
					}
					if len(head) == 1 && head[0].Terminal() {
						seen[i] = time.Now()
						open.Add(-1)
						continue
					}
					// The time is up for a task whose record went out
					// adapterBurstWithin ago: stop reading it.
					if at, ok := sent.get(adapterChannel(ids[i])); ok && time.Since(at) > adapterBurstWithin+time.Second {
						seen[i] = time.Now()
						open.Add(-1)
					}
				}
				if idle {
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return []string{fmt.Sprintf("reading result channels: %v", err)}
	}
	var stuck []string
	for i, id := range ids {
		ch := adapterChannel(id)
		at, ok := sent.get(ch)
		head, err := peek(ch, 1)
		if err != nil {
			return append(stuck, fmt.Sprintf("final peek of %s: %v", ch, err))
		}
		msgs := head
		if len(head) == 0 || !head[0].Terminal() {
			// A peek that finds fewer than it asks for waits its whole
			// second: only for the channels that show what went wrong.
			if msgs, err = peek(ch, 4); err != nil {
				return append(stuck, fmt.Sprintf("peek of %s: %v", ch, err))
			}
		}
		switch {
		case !ok:
			stuck = append(stuck, fmt.Sprintf("%s: inferq never sent its record; the channel holds %v", ch, msgs))
		case seen[i].IsZero() || seen[i].Sub(at) > adapterBurstWithin:
			stuck = append(stuck, fmt.Sprintf("%s: no terminal record at the head %v after inferq's send; the channel holds %v (oldest first)",
				ch, adapterBurstWithin, msgs))
		case len(head) == 0 || !head[0].Terminal():
			stuck = append(stuck, fmt.Sprintf("%s: the head was terminal, then is not; the channel holds %v (oldest first)", ch, msgs))
		}
	}
	return stuck
}

// sendTimes records when inferq's first record for each result channel was
// sent.
type sendTimes struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (s *sendTimes) get(ch string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.at[ch]
	return at, ok
}

// timedBroker is a results.Broker that notes when each compat channel's
// first record was sent.
type timedBroker struct {
	results.Broker
	sent *sendTimes
}

func (b timedBroker) SendQueue(ctx context.Context, channel string, body []byte, expiry time.Duration, write string) error {
	err := b.Broker.SendQueue(ctx, channel, body, expiry, write)
	if err == nil && strings.HasPrefix(channel, "rayserve-result-") {
		b.sent.mu.Lock()
		if _, ok := b.sent.at[channel]; !ok {
			b.sent.at[channel] = time.Now()
		}
		b.sent.mu.Unlock()
	}
	return err
}
