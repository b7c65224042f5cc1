package chaos

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferq/inferq/models/examples"
)

var (
	fullFlag = flag.Bool("chaos.full", false, "run the full form (issue 11's sizes: 20k tasks, 100k hostile flood, 30 s outages); default the short form")
	binFlag  = flag.String("chaos.bin", "", "inferq binary to test; default: build ./cmd/inferq once")
	logsFlag = flag.String("chaos.logs", "", "directory to keep each inferq process's log in (<scenario>-<n>.log, the first 100 MB)")
)

// sizes are a form's scale. The short form runs in seconds per scenario
// (it is part of `make test`); the full form is issue 11's acceptance run.
type sizes struct {
	name string
	// tasks is the valid load of the process and broker fault scenarios.
	tasks int
	// floodValid and floodHostile are the flood's valid tasks and hostile
	// messages.
	floodValid, floodHostile int
	// outage is how long the broker is frozen or away, or the result
	// store held.
	outage time.Duration
	// readyWithin is how long a frozen broker may go unnoticed by /readyz.
	readyWithin time.Duration
	// watch is how long a poison task (item 1) is watched for a loop.
	watch time.Duration
	// slowConns trickle for slowFor.
	slowConns int
	slowFor   time.Duration
	// stops is the number of kill -9 or SIGTERM stops under load.
	stops int
	// settle bounds the wait for every sent task's outcome; linger is the
	// wait after it, for a second record or a late dead letter.
	settle, linger time.Duration
}

var (
	shortSizes = sizes{name: "short", tasks: 2000, floodValid: 500, floodHostile: 2000, outage: 2 * time.Second,
		readyWithin: 15 * time.Second, watch: 5 * time.Second, slowConns: 200, slowFor: 3 * time.Second, stops: 2,
		settle: 90 * time.Second, linger: 500 * time.Millisecond}
	fullSizes = sizes{name: "full", tasks: 20000, floodValid: 10000, floodHostile: 100000, outage: 30 * time.Second,
		readyWithin: 15 * time.Second, watch: 60 * time.Second, slowConns: 200, slowFor: 60 * time.Second, stops: 3,
		settle: 10 * time.Minute, linger: 5 * time.Second}
)

func form() sizes {
	if *fullFlag {
		return fullSizes
	}
	return shortSizes
}

// harness is what every scenario shares: the inferq binary, the example
// models, the onnxruntime library and the run's id. It is made once, by
// the first scenario that runs.
type harness struct {
	bin, models, lib string
	// run names this run's channels: a real KubeMQ keeps channels 24 h.
	run string
	err error

	// faultBin is inferq built with -tags faultinject (faultBinary).
	faultOnce sync.Once
	faultBin  string
	faultErr  error
}

var (
	shared     harness
	sharedOnce sync.Once
	sharedDir  string
	summary    table
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if sharedDir != "" {
		os.RemoveAll(sharedDir)
	}
	if summary.len() > 0 {
		fmt.Print(summary.String())
	}
	os.Exit(code)
}

// setup returns the shared harness, building inferq on first use; it skips
// the test in -short mode or without onnxruntime.
func setup(t *testing.T) *harness {
	t.Helper()
	if testing.Short() {
		t.Skip("chaos: runs the inferq binary")
	}
	sharedOnce.Do(func() { shared.err = shared.init() })
	if shared.err != nil {
		if strings.HasPrefix(shared.err.Error(), "skip: ") {
			t.Skip(shared.err)
		}
		t.Fatal(shared.err)
	}
	return &shared
}

func (h *harness) init() error {
	h.lib = os.Getenv("INFERQ_ORT_LIB")
	if h.lib == "" {
		h.lib, _ = filepath.Abs("../lib/libonnxruntime.so.1")
	}
	if _, err := os.Stat(h.lib); err != nil {
		return fmt.Errorf("skip: onnxruntime library not found at %s: run `make setup`", h.lib)
	}
	dir, err := os.MkdirTemp("", "inferq-chaos-")
	if err != nil {
		return err
	}
	sharedDir = dir
	h.run = fmt.Sprintf("%x", time.Now().UnixNano()%(1<<40))
	h.models = filepath.Join(dir, "models")
	if _, err := examples.Write(h.models, false); err != nil {
		return fmt.Errorf("example models: %w", err)
	}
	if *binFlag != "" {
		h.bin, err = filepath.Abs(*binFlag)
		return err
	}
	h.bin = filepath.Join(dir, "inferq")
	cmd := exec.Command("go", "build", "-o", h.bin, "./cmd/inferq")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/inferq: %v\n%s", err, out)
	}
	return nil
}

// faultBinary returns inferq built with -tags faultinject (its
// INFERQ_FAULT_RUN_DELAY makes inference slow; without the variables it
// behaves as the normal binary), built once on first use; with
// -chaos.bin, that binary (the delay works only if it is such a build).
func (h *harness) faultBinary() (string, error) {
	h.faultOnce.Do(func() {
		if *binFlag != "" {
			h.faultBin = h.bin
			return
		}
		h.faultBin = filepath.Join(sharedDir, "inferq-faultinject")
		cmd := exec.Command("go", "build", "-tags", "faultinject", "-o", h.faultBin, "./cmd/inferq")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			h.faultErr = fmt.Errorf("go build -tags faultinject ./cmd/inferq: %v\n%s", err, out)
		}
	})
	return h.faultBin, h.faultErr
}
