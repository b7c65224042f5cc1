package worker

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/broker/brokertest"
	"github.com/inferq/inferq/client"
	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/consumer/consumertest"
	"github.com/inferq/inferq/crash"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
)

// A full data dir (issue 27 item 6) as the worker shows it: tasks run,
// one warning, /readyz fails with journal_ok false, and /metrics has
// inferq_journal_write_failing 1 and the refused writes counted; once the
// disk has room, all of it clears.
func TestWorkerJournalFullDisk(t *testing.T) {
	srv := brokertest.NewServer(t, broker.Options{PollWaitFloor: 20 * time.Millisecond, SecondLength: 20 * time.Millisecond})
	var full atomic.Bool
	var logs consumertest.LogBuffer
	w, err := New(context.Background(), Config{
		Broker:   mq.Config{Address: srv.Addr, ClientID: "journal-test"},
		Models:   []consumer.Model{mlpModel("mlp", nil)},
		DataDir:  t.TempDir(),
		Consumer: consumer.Config{Worker: "test", IntakeWorkers: 1, Writers: 4, DrainTimeout: 5 * time.Second},
		HTTP:     models.HTTP{Listen: "127.0.0.1:0"},
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
		Journal: crash.JournalConfig{WrapWriter: func(w io.WriterAt) io.WriterAt {
			return writerAtFunc(func(p []byte, off int64) (int, error) {
				if full.Load() {
					return 0, &os.PathError{Op: "write", Path: "attempts.journal", Err: syscall.ENOSPC}
				}
				return w.WriteAt(p, off)
			})
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	waitFor(t, 30*time.Second, "ready", w.Ready)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + w.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if path == "/readyz" {
			return resp.StatusCode, strings.ReplaceAll(string(b), " ", "")
		}
		return resp.StatusCode, string(b)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	c, err := client.New(cctx, client.Config{Broker: mq.Config{Address: srv.Addr, ClientID: "journal-test-producer"}, Identity: "journal-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	run := func() {
		t.Helper()
		id, err := c.Enqueue(cctx, "mlp", []tensor.Tensor{tensor.NewTensor("x", []int64{1, 16}, make([]float32, 16))})
		if err != nil {
			t.Fatal(err)
		}
		if rec, err := c.Wait(cctx, id); err != nil || rec.Status != task.StatusSuccess {
			t.Fatalf("record %+v, err %v", rec, err)
		}
	}

	full.Store(true)
	for range 5 {
		run()
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, `"journal_ok":false`) {
		t.Errorf("/readyz on a full data dir: %d %s", code, body)
	}
	_, metrics := get("/metrics")
	if !strings.Contains(metrics, "inferq_journal_write_failing 1") || !strings.Contains(metrics, "inferq_journal_write_errors_total 5") {
		t.Errorf("/metrics on a full data dir:\n%s", grepLines(metrics, "inferq_journal"))
	}
	if n := strings.Count(logs.String(), "attempt journal not written"); n != 1 {
		t.Errorf("%d journal warnings for 5 tasks, want 1:\n%s", n, logs.String())
	}

	full.Store(false)
	run()
	if code, body := get("/readyz"); code != http.StatusOK || !strings.Contains(body, `"journal_ok":true`) {
		t.Errorf("/readyz once the disk has room: %d %s", code, body)
	}
	if _, metrics := get("/metrics"); !strings.Contains(metrics, "inferq_journal_write_failing 0") {
		t.Errorf("/metrics once the disk has room:\n%s", grepLines(metrics, "inferq_journal"))
	}
}

type writerAtFunc func(p []byte, off int64) (int, error)

func (f writerAtFunc) WriteAt(p []byte, off int64) (int, error) { return f(p, off) }

// grepLines returns the lines of s that hold sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
