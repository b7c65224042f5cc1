package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/models/examples"
	"github.com/inferq/inferq/runtime"
	"github.com/inferq/inferq/tensor"
)

// TestGPUCheck is the measurement of scripts/gpu-check.sh, for a machine
// with an NVIDIA GPU: resnet18 (random weights) through Session.RunBatch on
// cuda:0 and on the CPU at batch 1, 8 and 32, in images per second, as a
// table on stdout (and in $INFERQ_GPU_CHECK_OUT when set). It runs only
// with INFERQ_GPU_CHECK=1 and fails when the CUDA session cannot be made
// or when Go's signal handling does not survive it.
func TestGPUCheck(t *testing.T) {
	if os.Getenv("INFERQ_GPU_CHECK") == "" {
		t.Skip("set INFERQ_GPU_CHECK=1 (scripts/gpu-check.sh does) on a machine with an NVIDIA GPU")
	}
	env := newEnv(t)
	model := examples.ResNet18()
	perRun := 3 * time.Second
	if v := os.Getenv("INFERQ_GPU_CHECK_SECONDS"); v != "" {
		if d, err := time.ParseDuration(v + "s"); err == nil {
			perRun = d
		}
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGUSR1)
	defer signal.Stop(sigs)

	type row struct {
		device string
		batch  int
		ips    float64
		p50    time.Duration
		err    error
	}
	var rows []row
	var cudaErr error
	for _, dev := range []runtime.Device{runtime.CUDA(0), runtime.CPU()} {
		start := time.Now()
		s, err := runtime.NewSession(env, runtime.SessionConfig{Name: "resnet18", Model: model, Device: dev,
			CUDNNConvAlgoSearch: "HEURISTIC"})
		if err != nil {
			if dev.Kind == runtime.KindCUDA {
				cudaErr = err
			}
			rows = append(rows, row{device: dev.String(), err: err})
			continue
		}
		t.Logf("%s: session created in %s", dev, time.Since(start).Round(time.Millisecond))
		for _, n := range []int{1, 8, 32} {
			r := row{device: dev.String(), batch: n}
			in := tensor.NewTensor("input", []int64{int64(n), 3, 224, 224}, make([]float32, n*3*224*224))
			items := []batch.Item{{Inputs: []tensor.Tensor{in}}}
			if err := s.Warmup(context.Background(), n); err != nil {
				r.err = err
				rows = append(rows, r)
				continue
			}
			var lat []time.Duration
			t0 := time.Now()
			for len(lat) < 3 || time.Since(t0) < perRun {
				t1 := time.Now()
				if res := s.RunBatch(context.Background(), items); res[0].Err != nil {
					r.err = res[0].Err
					break
				}
				lat = append(lat, time.Since(t1))
			}
			if r.err == nil {
				r.ips = float64(n*len(lat)) / time.Since(t0).Seconds()
				r.p50 = median(lat)
			}
			rows = append(rows, r)
		}
		_ = s.Close()
	}

	// Go still gets its signals after the CUDA provider was loaded.
	signalOK := true
	_ = syscall.Kill(os.Getpid(), syscall.SIGUSR1)
	select {
	case <-sigs:
	case <-time.After(5 * time.Second):
		signalOK = false
	}

	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "device\tbatch\timages/s\tp50 ms/batch\t")
	var errs []string
	for _, r := range rows {
		if r.err != nil {
			what := fmt.Sprintf("batch %d", r.batch)
			if r.batch == 0 {
				what = "session"
			}
			fmt.Fprintf(tw, "%s\t-\terror\t-\t\n", r.device)
			errs = append(errs, fmt.Sprintf("%s %s: %s", r.device, what, oneLine(r.err)))
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.2f\t\n", r.device, r.batch, r.ips, float64(r.p50.Microseconds())/1000)
	}
	_ = tw.Flush()
	for _, e := range errs {
		fmt.Fprintln(&b, "error: "+e)
	}
	fmt.Fprintf(&b, "signals after CUDA load: %v\n", map[bool]string{true: "ok", false: "LOST"}[signalOK])
	fmt.Print("\n" + b.String())
	if p := os.Getenv("INFERQ_GPU_CHECK_OUT"); p != "" {
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
	if cudaErr != nil {
		t.Errorf("no CUDA session (unavailable provider: %v): %v", errors.Is(cudaErr, runtime.ErrProviderUnavailable), cudaErr)
	}
	if !signalOK {
		t.Error("SIGUSR1 not delivered to Go after the CUDA provider was loaded")
	}
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s[len(s)/2]
}

func oneLine(err error) string {
	s := strings.ReplaceAll(err.Error(), "\n", " ")
	if len(s) > 400 {
		s = s[:400] + "..."
	}
	return s
}
