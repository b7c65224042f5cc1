package main

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/inferq/inferq/task"
)

// SIGTERM mid-load (DESIGN.md 4.10): the process stops polling, finishes
// or gives back what it took, exits 0, and a restarted process finishes the
// queue: every task gets its result, none is lost.
func TestSIGTERMMidLoadLosesNothing(t *testing.T) {
	r := newBinaryRig(t, "term", nil, "    batching: {max_batch_size: 8, max_queue_delay: 1ms}\n")
	const n = 3000
	ids, x0 := make([]string, n), make([]float32, n)
	for i := range ids {
		ids[i], x0[i] = fmt.Sprintf("t%d", i), float32(i)
	}
	r.send(ids, x0)

	cmd, logs, done := r.serve()
	deadline := time.Now().Add(60 * time.Second)
	for r.count() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after SIGTERM the process exited with %v, want 0\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("the process did not stop within 30 s of SIGTERM\n%s", logs.String())
	}
	t.Logf("%d of %d results stored before the stop", r.count(), n)

	cmd, logs, done = r.serve()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-done
	}()
	restartDeadline := time.Now().Add(time.Minute)
	for r.count() < n {
		select {
		case err := <-done:
			t.Fatalf("second process ended: %v\n%s", err, logs.String())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(restartDeadline) {
			t.Fatalf("only %d of %d results a minute after the restart\n%s", r.count(), n, logs.String())
		}
	}
	for _, id := range ids {
		if rec := r.record(id); rec.Status != task.StatusSuccess {
			t.Errorf("%s: %s %q", id, rec.Status, rec.Error)
		}
	}
	r.mu.Lock()
	t.Logf("%d duplicate records (at-least-once delivery)", r.dupes)
	r.mu.Unlock()
}
