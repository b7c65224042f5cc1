package consumer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/task"
)

// versioned is a batcher that says which model version took each request
// (batch.Request.Version), as a model repository's does.
type versioned struct {
	consumer.Batcher
	version string
}

func (v versioned) Enqueue(ctx context.Context, r *batch.Request) error {
	r.Version = v.version
	return v.Batcher.Enqueue(ctx, r)
}

// The record's model_version is the version the batcher says ran the
// task, not the model's configured one.
func TestRecordCarriesRanVersion(t *testing.T) {
	h := newHarness(t, func(c *harnessConfig) {
		c.configure = func(cc *consumer.Config) { cc.Models[0].Batcher = versioned{cc.Models[0].Batcher, "7"} }
	})
	h.send("t1", 3, 1)
	r := h.record("t1")
	resp, err := r.Response()
	if err != nil || r.Status != task.StatusSuccess {
		t.Fatalf("record %+v: %v", r, err)
	}
	if resp.ModelVersion != "7" {
		t.Errorf("model_version %q, want 7", resp.ModelVersion)
	}
}

// AddModel serves a model on a queue of its own (polled from then on),
// refuses a name served already; RemoveModel stops its queue.
func TestAddRemoveModel(t *testing.T) {
	h := newHarness(t)
	waitFor(t, 30*time.Second, "ready", h.cons.Ready)
	m := consumer.Model{Config: h.cfg.model, Info: fakeInfo, Batcher: newFakeBatcher()}
	m.Config.Name, m.Config.Queue = "added", h.q+".added"
	if err := h.cons.AddModel(m); err != nil {
		t.Fatal(err)
	}
	if err := h.cons.AddModel(m); err == nil || !strings.Contains(err.Error(), "served already") {
		t.Errorf("second AddModel: %v", err)
	}
	msg := h.taskMsg("a1", "added", 2, 1)
	msg.Channel = m.Config.Queue
	h.sendMsg(msg)
	if r := h.record("a1"); r.Status != task.StatusSuccess {
		t.Fatalf("record %+v", r)
	}
	if _, ok := h.cons.PollerStats()[m.Config.Queue]; !ok {
		t.Fatal("the added model's queue is not polled")
	}
	if err := h.cons.RemoveModel(t.Context(), "added"); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.cons.PollerStats()[m.Config.Queue]; ok {
		t.Error("the removed model's queue is still polled")
	}
	if err := h.cons.RemoveModel(t.Context(), "added"); err == nil {
		t.Error("second RemoveModel: no error")
	}
}
