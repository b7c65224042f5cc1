package consumer_test

import (
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
)

// A queued task or a query of more rows than batching.max_batch_size is
// refused at admission naming the field, as HTTP and gRPC requests are
// (issue 25 item 8: 65 rows on a model of 64 ran as one run of 65): the
// task gets a FAILURE record on its first attempt and goes to the dead
// letter queue, the query a FAILURE response; neither runs. Up to
// max_batch_size rows run.
func TestMaxBatchSizeRefused(t *testing.T) {
	h := newHarness(t, func(c *harnessConfig) { c.model.Batching.MaxBatchSize = 4 })
	rows := func(n int) []tensor.Tensor {
		return []tensor.Tensor{tensor.NewTensor("x", []int64{int64(n), 4}, make([]float32, 4*n))}
	}
	for _, n := range []int{4, 5} {
		body, tags, err := task.NewTask("t"+string(rune('0'+n)), testModel, rows(n), task.WithReplyTo(h.reply))
		if err != nil {
			t.Fatal(err)
		}
		h.sendMsg(mq.OutMessage{Channel: h.q, Body: body, Tags: tags})
	}
	if r := h.record("t4"); r.Status != task.StatusSuccess {
		t.Errorf("a task of 4 rows: %+v", r)
	}
	r := h.record("t5")
	if r.Status != task.StatusFailure || r.Attempts != 1 || !strings.Contains(r.Error, "batching.max_batch_size 4") || !strings.Contains(r.Error, `input "x": 5 rows`) {
		t.Errorf("a task of 5 rows: %+v, want FAILURE naming batching.max_batch_size", r)
	}
	waitFor(t, 5*time.Second, "the DLQ", func() bool { return len(h.queueMsgs(h.q+".dlq")) == 1 })
	h.waitQueries()
	for _, n := range []int{4, 5} {
		body, tags, err := task.NewQuery(testModel, rows(n))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := h.query(body, tags, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case n <= 4 && resp.Status != task.StatusSuccess:
			t.Errorf("a query of %d rows: %+v", n, resp)
		case n > 4 && (resp.Status != task.StatusFailure || !strings.Contains(resp.Error, "batching.max_batch_size 4")):
			t.Errorf("a query of %d rows: %+v, want FAILURE naming batching.max_batch_size", n, resp)
		}
	}
	if n := h.fake.RunsOf(0); n != 2 {
		t.Errorf("%d runs, want the task and the query of 4 rows", n)
	}
	h.settled(h.q)
}
