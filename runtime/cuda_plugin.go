package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	ort "github.com/yalue/onnxruntime_go"
)

// pluginEP is an execution provider that onnxruntime loads from its own
// shared library next to libonnxruntime.so.
type pluginEP struct {
	registration string // name given to RegisterExecutionProviderLibrary
	file         string // the provider library
	epName       string // onnxruntime's name for the provider
}

var (
	cudaPlugin     = pluginEP{"CUDA", "libonnxruntime_providers_cuda.so", "CUDAExecutionProvider"}
	tensorRTPlugin = pluginEP{"TensorRT", "libonnxruntime_providers_tensorrt.so", "TensorrtExecutionProvider"}
)

// appendPluginEPs registers the TensorRT (when asked) and CUDA provider
// libraries found in libDir with onnxruntime, once per environment, and
// appends them for cfg.Device. The provider lists one device per GPU CUDA
// sees, in CUDA's order, so CUDA GPU i is the provider's i-th device. The
// caller holds ortProcess.signals: loading the libraries is what replaces
// the signal handlers.
func appendPluginEPs(opts *ort.SessionOptions, cfg SessionConfig, libDir string) error {
	if cfg.TensorRT {
		if err := tensorRTPlugin.append(opts, libDir, cfg.Device.Index, map[string]string{"device_id": strconv.Itoa(cfg.Device.Index)}); err != nil {
			return fmt.Errorf("TensorRT: %w", err)
		}
	}
	return cudaPlugin.append(opts, libDir, cfg.Device.Index, cudaOptions(cfg))
}

func (p pluginEP) append(opts *ort.SessionOptions, libDir string, gpu int, options map[string]string) error {
	devs, err := p.devices()
	if err != nil {
		return err
	}
	if len(devs) == 0 {
		path := filepath.Join(libDir, p.file)
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("%s is not next to libonnxruntime.so in %s (run `make setup-gpu` and pass --ort-lib lib/gpu): %w", p.file, libDir, err)
		}
		if err := ort.RegisterExecutionProviderLibrary(p.registration, path); err != nil {
			return fmt.Errorf("load %s (it needs the CUDA 13 and cuDNN 9 libraries on the library path): %w", path, err)
		}
		if devs, err = p.devices(); err != nil {
			return err
		}
	}
	if gpu >= len(devs) {
		if len(devs) == 0 {
			return errors.New(p.epName + " found no GPU (is the NVIDIA driver loaded, and CUDA_VISIBLE_DEVICES not empty?)")
		}
		return fmt.Errorf("%s sees %d GPU(s); there is no CUDA device %d", p.epName, len(devs), gpu)
	}
	return opts.AppendExecutionProviderV2(devs[gpu:gpu+1], options)
}

// devices returns the provider's devices, in onnxruntime's order.
func (p pluginEP) devices() ([]ort.EpDevice, error) {
	all, err := ort.GetEpDevices()
	if err != nil {
		return nil, fmt.Errorf("list execution provider devices: %w", err)
	}
	var out []ort.EpDevice
	for _, d := range all {
		if d.EpName() == p.epName {
			out = append(out, d)
		}
	}
	return out, nil
}
