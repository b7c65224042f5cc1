package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"go.yaml.in/yaml/v3"

	"github.com/inferq/inferq/gpu/gputest"
	"github.com/inferq/inferq/models"
)

// kubernetesModels returns the models of the config in
// configs/kubernetes/configmap.yaml.
func kubernetesModels(t *testing.T) []models.Model {
	t.Helper()
	data, err := os.ReadFile("../../configs/kubernetes/configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal(data, &cm); err != nil {
		t.Fatal(err)
	}
	c, err := models.Parse([]byte(cm.Data["inferq.yaml"]))
	if err != nil {
		t.Fatal(err)
	}
	return c.Models
}

func TestDevicesPlacementTwoGPUs(t *testing.T) {
	a, out, _ := testApp(nil)
	if err := a.showDevices(gputest.TwoGPUs(), kubernetesModels(t), "", false); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	t.Log("\n" + got)
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "2 GPU(s)") || !strings.HasSuffix(lines[1], "MODELS") {
		t.Fatalf("want a header, a table head and two GPUs:\n%s", got)
	}
	// resnet18 (device cuda) on both GPUs; mlp x2 (device [0]) on GPU 0.
	if !strings.HasPrefix(lines[2], "0 ") || !strings.HasSuffix(lines[2], "resnet18, mlp x2") || !strings.Contains(lines[2], "10%") {
		t.Errorf("GPU 0 row: %q", lines[2])
	}
	if !strings.HasPrefix(lines[3], "1 ") || !strings.HasSuffix(lines[3], "resnet18") || !strings.Contains(lines[3], "12288 MiB") {
		t.Errorf("GPU 1 row: %q", lines[3])
	}
}

func TestDevicesPlacementCUDAVisible(t *testing.T) {
	a, out, _ := testApp(nil)
	ms := kubernetesModels(t)
	// Only GPU 1 visible: it is CUDA's 0, so mlp's [0] lands on it.
	if err := a.showDevices(gputest.TwoGPUs(), ms, "1", true); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if !strings.Contains(got, "CUDA") || !strings.Contains(got, "hidden") {
		t.Errorf("no CUDA column or hidden GPU:\n%s", got)
	}
	rows := strings.Split(got, "\n")
	if !strings.HasSuffix(rows[2], " -") || !strings.HasSuffix(rows[3], "resnet18, mlp x2") {
		t.Errorf("rows:\n%s", got)
	}

	// Nothing visible: device cuda cannot be placed, and it says why.
	a, out, _ = testApp(nil)
	err := a.showDevices(gputest.TwoGPUs(), ms, "", true)
	if err == nil || !strings.Contains(err.Error(), `model "resnet18" asks for device cuda`) || !strings.Contains(err.Error(), `CUDA_VISIBLE_DEVICES="" hides every GPU`) {
		t.Errorf("error %v", err)
	}
	if !strings.Contains(out.String(), "none usable") {
		t.Errorf("output:\n%s", out)
	}
}

func TestDevicesPlacementFitsNowhere(t *testing.T) {
	ms := kubernetesModels(t)
	ms[0].CUDA.GPUMemLimit = 64 << 30
	a, _, _ := testApp(nil)
	err := a.showDevices(gputest.TwoGPUs(), ms, "", false)
	if err == nil || !strings.Contains(err.Error(), `placement: runtime: model "resnet18" fits on no GPU`) {
		t.Fatalf("error %v", err)
	}
}

func TestDevicesNoGPUWithConfig(t *testing.T) {
	a, out, _ := testApp(nil)
	ms := kubernetesModels(t)
	for i := range ms {
		ms[i].Device = models.Device{Kind: models.DeviceAuto}
	}
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	if err := a.showDevices(lib, ms, "", false); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if !strings.HasPrefix(got, "no GPU: NVML init failed") || !strings.Contains(got, "cpu: mlp x2, resnet18\n") || !strings.Contains(got, "running on the CPU") {
		t.Errorf("output:\n%s", got)
	}
}

func TestDevicesFlagConfig(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(p, []byte("models:\n  - {name: m, path: m.onnx, device: cpu, instances: 3}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, out, errb := testApp(nil)
	if code := a.main(context.Background(), []string{"devices", "--config", p}); code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	// Whatever this machine has, the CPU model is listed.
	if !strings.Contains(out.String(), "cpu: m x3") {
		t.Errorf("output:\n%s", out)
	}
	a, _, errb = testApp(nil)
	if code := a.main(context.Background(), []string{"devices", "--config", filepath.Join(dir, "none.yaml")}); code == 0 || !strings.Contains(errb.String(), "none.yaml") {
		t.Errorf("missing config: exit %d, %s", code, errb)
	}
}

func TestDevicesBrokenGPU(t *testing.T) {
	s := gputest.TwoGPUs()
	s.Devices[1].(*dgxa100.Device).GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }
	a, out, _ := testApp(nil)
	ms := []models.Model{models.NewModel("c")}
	ms[0].Device = models.Device{Kind: models.DeviceCPU}
	if err := a.showDevices(s, ms, "", false); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.HasPrefix(got, "no GPU: gpu: device 1 uuid: ") || !strings.Contains(got, "cpu: c\n") {
		t.Errorf("output:\n%s", got)
	}
}
