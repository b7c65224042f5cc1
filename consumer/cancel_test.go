package consumer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/task"
	pb "github.com/kubemq-io/protobuf/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The Python adapter's soft cancel crossing the task's finish (issue 25
// item 5; KUBEMQ.md trap 24). cancel_task_sync purges the task's result
// channel with AckAll, which sits out its whole wait (1 s), then writes a
// CANCELLED record; the finish removes the channel's old record and writes
// SUCCESS. Each crossing releases the task's run at another moment of the
// cancel: just before it, during the purge, and after the CANCELLED is
// written. In every one the producer's CANCELLED must survive (inferq never
// removes a record the producer wrote after its PENDING) and be what the
// adapter's reader sees (the channel's oldest record): a soft cancel wins
// over a finish it crosses (README, DESIGN.md 4.7), but for the adapter's own
// gap: its purge and its write are two calls, and a record that lands
// between them is read first. So a crossing may end on inferq's record only
// when the broker stored it after the purge (its timestamp later than half a
// broker second before the purge returned, for the reply's way back) and
// before the CANCELLED; one stored inside the purge must be purged. inferq's
// own result stays in its store, for GET /v1/tasks/{id}.
func TestAdapterCancelCrossesFinish(t *testing.T) { forBrokers(t, testAdapterCancelCrossesFinish) }

func testAdapterCancelCrossesFinish(t *testing.T, on brokerOpt) {
	h := newHarness(t, on)
	h.fake.Gate = make(chan struct{})
	second, crossings := 50*time.Millisecond, 12 // the embedded broker's second (newHarness)
	if h.real {
		second, crossings = time.Second, 6
	}
	raw := rawClient(t, h.addr)
	var vanished, hidden int
	for i := range crossings {
		// From a quarter second before the cancel to two seconds after
		// it began (the CANCELLED lands after one).
		offset := -second/4 + time.Duration(i)*(second*9/4)/time.Duration(crossings-1)
		id := fmt.Sprintf("4f0c1d7e-0000-4000-8000-%012d", (time.Now().UnixNano()+int64(i))%1e12)
		ch := "rayserve-result-" + id
		// The adapter's enqueue: PENDING on the (new) result channel, then
		// the task (no reply_to).
		pending := (&task.Record{TaskID: id, Status: task.StatusPending, CreatedAt: time.Now()}).AppendJSON(nil)
		body := []byte(`{"task_id":"` + id + `","task_name":"m","args":[[1.5,2,3,4]],"kwargs":{},"created_at":"` + task.FormatTime(time.Now()) + `"}`)
		h.sendMsg(mq.OutMessage{Channel: ch, Body: pending, ExpirationSeconds: 3600}, mq.OutMessage{Channel: h.q, Body: body})
		waitFor(t, 10*time.Second, "the task's run to wait at the gate", func() bool { return h.fake.AtGate.Load() == 1 })

		done := make(chan error, 1)
		var purged, written time.Time
		cancel := func() {
			go func() {
				var err error
				purged, written, err = adapterCancel(raw, ch, id)
				done <- err
			}()
		}
		if offset < 0 {
			h.fake.Gate <- struct{}{}
			time.Sleep(-offset)
			cancel()
		} else {
			cancel()
			time.Sleep(offset)
			h.fake.Gate <- struct{}{}
		}
		if err := <-done; err != nil {
			t.Fatalf("crossing %d: the adapter's cancel: %v", i, err)
		}
		h.settled(h.q)

		var cancels int
		var head task.Status
		var headAt time.Time
		msgs := h.queueMsgs(ch)
		for j, m := range msgs {
			r, err := task.ParseRecord(m.Body)
			if err != nil {
				t.Fatalf("crossing %d: %s holds an unreadable record: %v", i, ch, err)
			}
			if j == 0 {
				head, headAt = r.Status, time.Unix(0, m.GetAttributes().GetTimestamp())
			}
			if r.Status == task.StatusCancelled && r.Worker == "" {
				cancels++
			}
		}
		if cancels == 0 {
			vanished++
		}
		gap := ""
		if head != task.StatusCancelled {
			if head == task.StatusSuccess && headAt.After(purged.Add(-second/2)) && !headAt.After(written) {
				gap = fmt.Sprintf(" (stored %v after the purge returned, %v before the CANCELLED's send returned: the adapter's gap)",
					headAt.Sub(purged), written.Sub(headAt))
			} else {
				hidden++
			}
		}
		t.Logf("crossing %d, run released %v after the cancel began: %s holds %d records, the reader sees %q%s",
			i, offset, ch, len(msgs), head, gap)
		if body, ok := h.store.Get(id); !ok {
			t.Errorf("crossing %d: inferq's store has no record of %s", i, id)
		} else if r, err := task.ParseRecord(body); err != nil || r.Status != task.StatusSuccess {
			t.Errorf("crossing %d: inferq's store holds %s for %s (%v), want its SUCCESS", i, body, id, err)
		}
	}
	if vanished > 0 || hidden > 0 {
		t.Errorf("of %d crossings, the producer's CANCELLED was consumed in %d and the reader did not see CANCELLED, outside the adapter's gap, in %d",
			crossings, vanished, hidden)
	}
}

// adapterCancel is the Python adapter's cancel_task_sync: AckAll on the
// task's result channel with a 1 s wait (a purge that sits it out), then a
// CANCELLED record with the adapter's 3600 s expiry and no tags. It returns
// when the purge returned and when the write did.
func adapterCancel(raw pb.KubemqClient, ch, id string) (purged, written time.Time, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ack, err := raw.AckAllQueueMessages(ctx, &pb.AckAllQueueMessagesRequest{
		RequestID: "purge-" + id, ClientID: "adapter", Channel: ch, WaitTimeSeconds: 1})
	if err == nil && ack.IsError {
		err = fmt.Errorf("%s", ack.Error)
	}
	if err != nil {
		return purged, written, fmt.Errorf("purge %s: %w", ch, err)
	}
	purged = time.Now()
	now := time.Now()
	rec := (&task.Record{TaskID: id, Status: task.StatusCancelled, CreatedAt: now, CompletedAt: now}).AppendJSON(nil)
	res, err := raw.SendQueueMessage(ctx, &pb.QueueMessage{ClientID: "adapter", Channel: ch, Body: rec,
		Policy: &pb.QueueMessagePolicy{ExpirationSeconds: 3600}})
	if err == nil && res.IsError {
		err = fmt.Errorf("%s", res.Error)
	}
	if err != nil {
		return purged, written, fmt.Errorf("write CANCELLED to %s: %w", ch, err)
	}
	return purged, time.Now(), nil
}

// rawClient is a plain gRPC client of the broker at addr, for the calls
// package mq does not make (the adapter's AckAll).
func rawClient(t *testing.T, addr string) pb.KubemqClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return pb.NewKubemqClient(cc)
}
