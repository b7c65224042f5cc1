package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

// testApp returns an app writing to buffers, with env as its environment.
func testApp(env map[string]string) (*app, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	return &app{
		stdout: &out, stderr: &errb,
		getenv:  func(k string) string { return env[k] },
		exePath: func() (string, error) { return "/nonexistent/inferq", nil },
	}, &out, &errb
}

// ortEnv points INFERQ_ORT_LIB at the repository's lib/, or skips.
func ortEnv(t *testing.T) map[string]string {
	t.Helper()
	lib := os.Getenv("INFERQ_ORT_LIB")
	if lib == "" {
		lib, _ = filepath.Abs("../../lib/libonnxruntime.so.1")
	}
	if _, err := os.Stat(lib); err != nil {
		t.Skipf("onnxruntime library not found at %s: run `make setup`", lib)
	}
	return map[string]string{"INFERQ_ORT_LIB": lib}
}

func TestUsage(t *testing.T) {
	tests := []struct {
		args     []string
		code     int
		out, err string
	}{
		{nil, 2, "", "Commands:"},
		{[]string{"help"}, 0, "Commands:", ""},
		{[]string{"--help"}, 0, "devices", ""},
		{[]string{"nope"}, 2, "", `unknown command "nope"`},
		{[]string{"broker", "--help"}, 0, "NOT FOR PRODUCTION", ""},
		{[]string{"help", "models"}, 0, "inspect FILE", ""},
		{[]string{"models", "--bogus"}, 2, "", "unknown flag: --bogus"},
		{[]string{"models", "frobnicate", "x"}, 2, "", `unknown models subcommand "frobnicate"`},
		{[]string{"models"}, 2, "", "want 'models inspect FILE'"},
		{[]string{"broker", "--log-level", "loud"}, 2, "", `--log-level "loud"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			a, out, errb := testApp(nil)
			if code := a.main(context.Background(), tt.args); code != tt.code {
				t.Errorf("exit code %d, want %d (stderr %q)", code, tt.code, errb)
			}
			if !strings.Contains(out.String(), tt.out) {
				t.Errorf("stdout %q does not contain %q", out, tt.out)
			}
			if !strings.Contains(errb.String(), tt.err) {
				t.Errorf("stderr %q does not contain %q", errb, tt.err)
			}
		})
	}
}

func TestDevicesNoGPU(t *testing.T) {
	a, out, _ := testApp(nil)
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	if err := a.printDevices(lib); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); strings.Count(got, "\n") != 1 || !strings.HasPrefix(got, "no GPU: NVML init failed: libnvidia-ml.so not found") {
		t.Errorf("want one line saying why, got %q", got)
	}
}

func TestDevicesFakeMachine(t *testing.T) {
	s := dgxa100.New()
	for _, d := range s.Devices {
		d.(*dgxa100.Device).GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: 42}, nvml.SUCCESS
		}
	}
	a, out, _ := testApp(nil)
	if err := a.printDevices(s); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if !strings.Contains(got, "8 GPU(s)") || strings.Count(got, "A100") != 8 || !strings.Contains(got, "42%") {
		t.Errorf("device table:\n%s", got)
	}
}

func TestDevicesCommandOnThisMachine(t *testing.T) {
	// Runs the real NVML path: on a machine without a GPU it must print one
	// line and succeed; with a GPU, a table.
	a, out, errb := testApp(nil)
	if code := a.main(context.Background(), []string{"devices"}); code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	if out.Len() == 0 {
		t.Fatal("no output")
	}
}

func TestModelsExampleAndInspect(t *testing.T) {
	env := ortEnv(t)
	dir := t.TempDir()
	a, out, errb := testApp(env)
	if code := a.main(context.Background(), []string{"models", "example", dir}); code != 0 {
		t.Fatalf("example: exit %d: %s", code, errb)
	}
	if !strings.Contains(out.String(), filepath.Join(dir, "mlp.onnx")) {
		t.Fatalf("example output: %q", out)
	}
	a, out, errb = testApp(env)
	if code := a.main(context.Background(), []string{"models", "inspect", filepath.Join(dir, "mlp.onnx")}); code != 0 {
		t.Fatalf("inspect: exit %d: %s", code, errb)
	}
	for _, want := range []string{"input   x      FP32      [-1,16]", "output  probs  FP32      [-1,4]"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out)
		}
	}
	a, _, errb = testApp(env)
	if code := a.main(context.Background(), []string{"models", "inspect", filepath.Join(dir, "missing.onnx")}); code != 1 || !strings.Contains(errb.String(), "missing.onnx") {
		t.Errorf("inspect of a missing file: exit %d, stderr %q", code, errb)
	}
}

func TestVersion(t *testing.T) {
	a, out, _ := testApp(ortEnv(t))
	if code := a.main(context.Background(), []string{"version"}); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(out.String(), "inferq dev") || !strings.Contains(out.String(), "onnxruntime 1.30.0") {
		t.Errorf("version output %q", out)
	}
	a, out, _ = testApp(map[string]string{"INFERQ_ORT_LIB": "/nonexistent/lib.so"})
	a.main(context.Background(), []string{"version"})
	if !strings.Contains(out.String(), "make setup") {
		t.Errorf("a missing library should say to run make setup: %q", out)
	}
}
