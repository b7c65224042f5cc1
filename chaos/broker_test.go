package chaos

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// brokerTarget is the broker under test: a fresh embedded broker (an
// `inferq broker` subprocess, in memory) per scenario, or the real KubeMQ
// at KUBEMQ_ADDRESS shared by all (channel names carry the run's id).
type brokerTarget struct {
	addr  string
	token string // KUBEMQ_AUTH_TOKEN, real broker only
	real  bool
	// restart is CHAOS_KUBEMQ_RESTART, a shell command that restarts the
	// real broker (such as `docker restart kubemq`); empty: the restart
	// scenario takes the broker away at the proxy instead.
	restart string

	cmd    *exec.Cmd
	exited chan error // the embedded broker's exit
}

// startBroker starts the embedded broker, or returns the real one when
// KUBEMQ_ADDRESS is set. The embedded one is stopped at the test's end.
func startBroker(t *testing.T, h *harness) *brokerTarget {
	t.Helper()
	if addr := os.Getenv("KUBEMQ_ADDRESS"); addr != "" {
		return &brokerTarget{addr: addr, real: true, token: os.Getenv("KUBEMQ_AUTH_TOKEN"), restart: os.Getenv("CHAOS_KUBEMQ_RESTART")}
	}
	b := &brokerTarget{exited: make(chan error, 1)}
	b.cmd = exec.Command(h.bin, "broker", "--listen", "127.0.0.1:0", "--log-level", "warn")
	b.cmd.Env = childEnv(nil)
	b.cmd.SysProcAttr = orphanKill()
	out, err := b.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	b.cmd.Stderr = io.Discard
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("start the embedded broker: %v", err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), "listening on "); ok {
				addr <- strings.Fields(rest)[0]
			}
		}
		b.exited <- b.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.exited:
		case <-time.After(5 * time.Second):
			_ = b.cmd.Process.Kill()
		}
	})
	select {
	case b.addr = <-addr:
	case err := <-b.exited:
		t.Fatalf("the embedded broker exited at start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the embedded broker did not say where it listens within 30 s")
	}
	return b
}

// alive reports a problem when the embedded broker exited by itself.
func (b *brokerTarget) alive() error {
	if b.real {
		return nil
	}
	select {
	case err := <-b.exited:
		b.exited <- err
		return fmt.Errorf("the embedded broker exited by itself: %v", err)
	default:
		return nil
	}
}

// restartReal runs CHAOS_KUBEMQ_RESTART.
func (b *brokerTarget) restartReal(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, "sh", "-c", b.restart).CombinedOutput()
	if err != nil {
		return fmt.Errorf("CHAOS_KUBEMQ_RESTART %q: %v\n%s", b.restart, err, out)
	}
	return nil
}

// childEnv is the environment of the processes the harness starts: this
// one's without the variables that would point inferq elsewhere (the
// harness passes the broker, HTTP address and data dir itself), plus extra.
func childEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "INFERQ_") || strings.HasPrefix(k, "KUBEMQ_") || strings.HasPrefix(k, "OTEL_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}
