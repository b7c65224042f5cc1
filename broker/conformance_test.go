package broker_test

// The conformance suite: every test that takes a *target runs against the
// embedded broker always, and against a real KubeMQ when KUBEMQ_ADDRESS is
// set (see newTarget). A row that differs between the two is a bug in
// package broker unless the test documents that the real broker is the odd
// one.

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
)

// target is one broker under test.
type target struct {
	Name     string         // "embedded" or "real"
	Addr     string         // host:port for kubemq-go clients
	Real     bool           // true for a real KubeMQ
	Embedded *broker.Server // nil for a real KubeMQ
}

// targets returns the brokers a conformance test runs against: the
// embedded one (started on 127.0.0.1:0, closed by t.Cleanup) and, when
// KUBEMQ_ADDRESS is set, the real one.
func targets(t *testing.T) []*target {
	t.Helper()
	return newTargets(t)
}

// newTargets is targets for any testing.TB (benchmarks use it too). With
// INFERQ_BROKER_TEST_DATA_DIR=1 the embedded broker keeps its data in a
// temporary data dir (Options.DataDir), so every row runs with persistence.
func newTargets(tb testing.TB) []*target {
	tb.Helper()
	opts := broker.Options{}
	if os.Getenv("INFERQ_BROKER_TEST_DATA_DIR") == "1" {
		opts.DataDir = tb.TempDir()
	}
	srv, err := broker.Open(opts)
	if err != nil {
		tb.Fatalf("open embedded broker: %v", err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		tb.Fatalf("start embedded broker: %v", err)
	}
	tb.Cleanup(func() { srv.Close() })
	ts := []*target{{Name: "embedded", Addr: srv.Addr(), Embedded: srv}}
	if addr := os.Getenv("KUBEMQ_ADDRESS"); addr != "" {
		ts = append(ts, &target{Name: "real", Addr: addr, Real: true})
	}
	return ts
}

// forEachTarget runs f as a subtest per target.
func forEachTarget(t *testing.T, f func(t *testing.T, tg *target)) {
	for _, tg := range targets(t) {
		t.Run(tg.Name, func(t *testing.T) { f(t, tg) })
	}
}

// channel returns a channel name unique to this test run, so that a real
// broker (which keeps channels for 24 h) never mixes runs.
func channel(t *testing.T, prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "-", " ", "-", "#", "-").Replace(t.Name())
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	return prefix + "." + strings.ToLower(name) + "." + hex.EncodeToString(b[:])
}

// waitFor polls cond until it is true or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s", d, what)
}

// hostPort splits tg.Addr for the kubemq-go options, which take them apart.
func (tg *target) hostPort(t testing.TB) (string, int) {
	t.Helper()
	host, port, err := net.SplitHostPort(tg.Addr)
	if err != nil {
		t.Fatalf("bad broker address %q: %v", tg.Addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("bad broker port in %q: %v", tg.Addr, err)
	}
	return host, p
}
