package worker

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/broker/brokertest"
	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/consumer/consumertest"
	"github.com/inferq/inferq/crash"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/mq"
)

// Crash reports (issue 27 item 2) as the worker wires them: without a
// fleet key it warns once at start that anyone who can publish on the
// crash channel can spend a task's budget; with one it does not, and
// /metrics counts refused reports by reason; a key too short is refused;
// without a fleet (LocalCrashCounts) there is nothing to warn of.
func TestWorkerCrashKey(t *testing.T) {
	srv := brokertest.NewServer(t, broker.Options{PollWaitFloor: 20 * time.Millisecond, SecondLength: 20 * time.Millisecond})
	const warning = "crash reports are not signed"
	start := func(t *testing.T, key []byte, local bool) (*Worker, string, error) {
		var logs consumertest.LogBuffer
		w, err := New(context.Background(), Config{
			Broker:           mq.Config{Address: srv.Addr, ClientID: "crash-key-" + strings.ReplaceAll(t.Name(), "/", "-")},
			Models:           []consumer.Model{mlpModel("mlp", nil)},
			Consumer:         consumer.Config{Worker: "test", IntakeWorkers: 1, Writers: 1, DrainTimeout: time.Second, Crash: crash.FleetConfig{Key: key}},
			Results:          models.Results{Spool: models.SpoolMemory},
			HTTP:             models.HTTP{Listen: "127.0.0.1:0"},
			LocalCrashCounts: local,
			Logger:           slog.New(slog.NewTextHandler(&logs, nil)),
		})
		if err == nil {
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			t.Cleanup(func() { cancel(); <-done })
		}
		return w, logs.String(), err
	}
	t.Run("no key", func(t *testing.T) {
		_, logs, err := start(t, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(logs, warning); n != 1 {
			t.Errorf("%d warnings about unsigned crash reports, want 1:\n%s", n, logs)
		}
	})
	t.Run("key", func(t *testing.T) {
		w, logs, err := start(t, []byte("a-fleet-key-of-some-length"), false)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(logs, warning) {
			t.Errorf("warns with a key:\n%s", logs)
		}
		resp, err := http.Get("http://" + w.Addr().String() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, reason := range crash.RefusedReasons() {
			if want := `inferq_crash_reports_refused_total{reason="` + reason + `"} 0`; !strings.Contains(string(body), want) {
				t.Errorf("/metrics lacks %s:\n%s", want, grepLines(string(body), "inferq_crash"))
			}
		}
	})
	t.Run("short key", func(t *testing.T) {
		if _, _, err := start(t, []byte("short"), false); err == nil || !strings.Contains(err.Error(), "at least") {
			t.Errorf("a 5-byte key: %v, want an error naming the minimum", err)
		}
	})
	t.Run("local counts", func(t *testing.T) {
		_, logs, err := start(t, nil, true)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(logs, warning) {
			t.Errorf("warns without a fleet:\n%s", logs)
		}
	})
}
