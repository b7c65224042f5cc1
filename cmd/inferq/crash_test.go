package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/task"
)

// A crash is an attempt (DESIGN.md 4.5): a task that kills the process
// whenever it runs reaches the dead letter queue after max_retries + 1
// crashes with "worker lost during inference", and the tasks that shared its
// batches all succeed. The fault switch is compiled only into a binary
// built with -tags faultinject; this test builds one and restarts it after
// every crash, as a supervisor (Kubernetes) would.
func TestCrashIsAnAttempt(t *testing.T) {
	const maxRetries = 2
	r := newBinaryRig(t, "crash", []string{"faultinject"}, fmt.Sprintf(`    batching: {max_batch_size: 16, max_queue_delay: 50ms}
    retries: {max_retries: %d, backoff_initial: 0}
`, maxRetries))

	// One poison task and seven innocent ones, sent together so that they
	// share the first batch.
	const poison = float32(13.375)
	ids, x0 := []string{"poison"}, []float32{poison}
	for i := 1; i < 8; i++ {
		ids, x0 = append(ids, fmt.Sprintf("innocent-%d", i)), append(x0, float32(i))
	}
	r.send(ids, x0)

	crashes := 0
	for run := 0; run < maxRetries+3 && r.count() < 8; run++ {
		cmd, logs, exited := r.serve(fmt.Sprintf("INFERQ_FAULT_CRASH_ON=%v", poison))
		deadline := time.After(60 * time.Second)
	wait:
		for {
			select {
			case err := <-exited:
				if err == nil || !strings.Contains(err.Error(), "killed") {
					t.Fatalf("run %d ended without the injected crash: %v\n%s", run, err, logs.String())
				}
				crashes++
				break wait
			case <-deadline:
				cmd.Process.Kill()
				t.Fatalf("run %d: no crash and not all records after 60 s\n%s", run, logs.String())
			case <-time.After(20 * time.Millisecond):
				if r.count() == 8 {
					cmd.Process.Signal(os.Interrupt)
					if err := <-exited; err != nil {
						t.Errorf("graceful stop: %v\n%s", err, logs.String())
					}
					break wait
				}
			}
		}
	}
	if n := r.count(); n < 8 {
		t.Fatalf("after %d crashes only %d of 8 records", crashes, n)
	}
	if crashes != maxRetries+1 {
		t.Errorf("the process crashed %d times, want max_retries+1 = %d", crashes, maxRetries+1)
	}
	p := r.record("poison")
	if p.Status != task.StatusFailure || !strings.Contains(p.Error, "worker lost during inference") || p.Attempts != maxRetries+1 {
		t.Errorf("poison record: status %s attempts %d error %q", p.Status, p.Attempts, p.Error)
	}
	for _, id := range ids[1:] {
		if rec := r.record(id); rec.Status != task.StatusSuccess {
			t.Errorf("%s: %s %q", id, rec.Status, rec.Error)
		}
	}
	if dlq := r.srv.Queue(r.queue + ".dlq"); len(dlq) != 1 || !strings.Contains(dlq[0].Tags[mq.TagError], "worker lost") {
		t.Errorf("dead letter queue holds %d messages", len(dlq))
	}
}
