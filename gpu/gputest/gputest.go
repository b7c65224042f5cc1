// Package gputest holds NVML fakes shared by the tests of the packages that
// place models on GPUs and sample them. For tests only.
package gputest

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
)

// TwoGPUs is a fake 2-GPU node (go-nvml's mock, two A100 40GB): GPU 0 with
// 30 GiB free and 10 % utilization, GPU 1 with 12 GiB free and 11 %.
func TwoGPUs() *dgxa100.Server {
	s := dgxa100.NewWithGPUs(gpus.Multiple(2, gpus.A100_SXM4_40GB)...)
	for i, free := range []uint64{30 << 30, 12 << 30} {
		d := s.Devices[i].(*dgxa100.Device)
		d.MemoryInfo.Free, d.MemoryInfo.Used = free, d.MemoryInfo.Total-free
		d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: uint32(10 + i)}, nvml.SUCCESS
		}
	}
	return s
}
