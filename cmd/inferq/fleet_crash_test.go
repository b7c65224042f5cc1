package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/task"
)

// One crash budget for the fleet (DESIGN.md 4.5, issue 12): three replicas
// on one queue, each with its own data dir (its own journal), share the
// crash count of a task through the crash reports on <queue>.crashes. A
// poison task that kills whichever replica runs it reaches the dead letter
// queue after max_retries + 1 crashes in total across the fleet, not per
// replica, and the 199 tasks around it all succeed. A supervisor (this
// test, as Kubernetes would) restarts every replica that dies.
//
// A replica's crash is known to the fleet once it restarts and reports,
// but the broker gives its messages back at once: until then another
// replica may run the poison task, with the same batch mates, not knowing
// ("blind"), and die too. That happens at most once per replica; every
// later run waits --crash-hold (longer than a restart) and knows every
// crash. So the crashes add up to exactly max_retries + 1 when replicas <=
// max_retries + 1, and the batch mates (at most one blind crash per
// replica) survive when replicas <= max_retries.
//
// The replicas sign their reports with a fleet key (--crash-key-file,
// issue 27 item 2), as the Kubernetes manifests have them do.
//
// On a real KubeMQ: KUBEMQ_ADDRESS=127.0.0.1:50000 go test ./cmd/inferq
// -run TestFleetCrashBudget -count=1 -v
func TestFleetCrashBudget(t *testing.T) {
	const (
		// max_retries >= replicas: the batch mates of the poison task
		// survive the crashes no replica could know of (see below).
		maxRetries = 3
		replicas   = 3
		tasks      = 200
		poison     = float32(13.375)
	)
	r := newBinaryRig(t, "fleet", []string{"faultinject"}, fmt.Sprintf(`    batching: {max_batch_size: 16, max_queue_delay: 50ms}
    retries: {max_retries: %d, backoff_initial: 0}
`, maxRetries))
	ids, x0 := make([]string, tasks), make([]float32, tasks)
	for i := range ids {
		ids[i], x0[i] = fmt.Sprintf("task-%03d", i), float32(i%7)
	}
	ids[tasks/2], x0[tasks/2] = "poison", poison

	sup := &supervisor{t: t, r: r, env: fmt.Sprintf("INFERQ_FAULT_CRASH_ON=%v", poison), t0: time.Now(),
		keyFile: filepath.Join(r.dir, "crash-key")}
	if err := os.WriteFile(sup.keyFile, []byte("fleet-crash-key-of-the-test-0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range replicas {
		sup.start(i)
	}
	r.send(ids, x0)
	t.Logf("%v: %d tasks sent", time.Since(sup.t0).Round(time.Millisecond), tasks)

	deadline := time.Now().Add(90 * time.Second)
	for r.count() < tasks && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%v: %d records", time.Since(sup.t0).Round(time.Millisecond), r.count())
	sup.stop()
	logs := sup.logs()
	if n := r.count(); n < tasks {
		t.Fatalf("after %d crashes only %d of %d records\n%s", sup.crashCount(), n, tasks, logs)
	}
	if c := sup.crashCount(); c != maxRetries+1 {
		t.Errorf("the fleet crashed %d times, want max_retries+1 = %d\n%s", c, maxRetries+1, logs)
	}
	p := r.record("poison")
	if p.Status != task.StatusFailure || !strings.Contains(p.Error, "worker lost during inference") || p.Attempts != maxRetries+1 {
		t.Errorf("poison record: status %s attempts %d error %q", p.Status, p.Attempts, p.Error)
	}
	for _, id := range ids {
		if rec := r.record(id); id != "poison" && rec.Status != task.StatusSuccess {
			t.Errorf("%s: %s %q", id, rec.Status, rec.Error)
		}
	}
	if dlq := r.peek(r.queue + ".dlq"); len(dlq) != 1 || !strings.Contains(dlq[0].Tags[mq.TagError], "worker lost") {
		t.Errorf("dead letter queue holds %d messages, want the poison task", len(dlq))
	}
	if strings.Contains(logs, "crash report refused") || strings.Contains(logs, "crash reports are not signed") {
		t.Errorf("the replicas' signed reports were refused, or a replica has no key")
	}
	if t.Failed() {
		t.Log(logs)
	}
}

// supervisor keeps replicas of `inferq serve` running, each on its own
// data dir, restarting one whenever it dies, and counts the deaths.
type supervisor struct {
	t   *testing.T
	r   *binaryRig
	env string
	t0  time.Time
	// keyFile is every replica's --crash-key-file; "" for none.
	keyFile string

	mu      sync.Mutex
	stopped bool
	crashes int
	running map[int]*exec.Cmd
	out     []*strings.Builder
	wg      sync.WaitGroup
}

// start runs replica i and restarts it after each crash until stop.
func (s *supervisor) start(i int) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			cmd, logs, done := s.launch(i)
			err := <-done
			s.mu.Lock()
			s.out = append(s.out, logs)
			delete(s.running, i)
			stopped := s.stopped
			if err != nil && strings.Contains(err.Error(), "killed") {
				s.crashes++
				s.t.Logf("%v: replica %d crashed (%d in all)", time.Since(s.t0).Round(time.Millisecond), i, s.crashes)
			} else if !stopped {
				s.t.Errorf("replica %d (pid %d) exited on its own: %v", i, cmd.Process.Pid, err)
				stopped = true
			}
			s.mu.Unlock()
			if stopped {
				return
			}
		}
	}()
}

func (s *supervisor) launch(i int) (*exec.Cmd, *strings.Builder, chan error) {
	args := []string{"serve", "--config", s.r.cfgPath, "--shutdown-grace", "10s", "--log-level", "info",
		"--data-dir", filepath.Join(s.r.dir, fmt.Sprintf("data-%d", i)), "--crash-hold", "3s"}
	if s.keyFile != "" {
		args = append(args, "--crash-key-file", s.keyFile)
	}
	cmd := exec.Command(s.r.bin, args...)
	cmd.Env = append(os.Environ(), "INFERQ_ORT_LIB="+s.r.lib, s.env)
	logs := &strings.Builder{}
	fmt.Fprintf(logs, "--- replica %d\n", i)
	cmd.Stdout, cmd.Stderr = lockedWriter{&s.mu, logs}, lockedWriter{&s.mu, logs}
	if err := cmd.Start(); err != nil {
		s.t.Errorf("replica %d: %v", i, err)
	}
	s.mu.Lock()
	if s.running == nil {
		s.running = map[int]*exec.Cmd{}
	}
	s.running[i] = cmd
	s.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return cmd, logs, done
}

// stop interrupts every replica (a graceful stop) and waits for them.
func (s *supervisor) stop() {
	s.mu.Lock()
	s.stopped = true
	for _, cmd := range s.running {
		_ = cmd.Process.Signal(os.Interrupt)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *supervisor) crashCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.crashes
}

func (s *supervisor) logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, l := range s.out {
		b.WriteString(l.String())
	}
	return b.String()
}

// lockedWriter serialises the writes of a process's stdout and stderr
// with the supervisor's reads of the log.
type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
