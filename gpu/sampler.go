package gpu

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultSampleInterval is how often a Sampler reads NVML by default.
const DefaultSampleInterval = 5 * time.Second

// SamplerConfig configures a Sampler.
type SamplerConfig struct {
	// Library is NVML (nvml.New()) or a fake.
	Library Library
	// Interval is the time between two samples; default
	// DefaultSampleInterval.
	Interval time.Duration
	// Logger receives devices that stop or resume answering; default:
	// discard.
	Logger *slog.Logger
}

func (c *SamplerConfig) setDefaults() {
	if c.Interval == 0 {
		c.Interval = DefaultSampleInterval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports the first field that cannot work.
func (c SamplerConfig) Validate() error {
	if c.Library == nil {
		return fmt.Errorf("gpu: sampler: nil Library")
	}
	if c.Interval < 0 {
		return fmt.Errorf("gpu: sampler: negative interval %s", c.Interval)
	}
	return nil
}

// Sampler reads every GPU's memory and utilization from NVML at an
// interval and exports the last sample as Prometheus gauges, labelled by
// NVML's GPU index:
//
//	inferq_gpu_utilization_ratio{gpu}   (absent where NVML does not report it)
//	inferq_gpu_memory_used_bytes{gpu}
//	inferq_gpu_memory_total_bytes{gpu}
//
// A GPU whose sample fails is left out until it answers again. Run owns the
// NVML session; Collect and Devices may be called from any goroutine.
type Sampler struct {
	cfg               SamplerConfig
	util, used, total *prometheus.Desc
	mu                sync.Mutex
	devices           []Device // the last sample, answering GPUs only
	sampled           bool
	sampleErr         map[int]bool // GPUs whose last sample failed
}

// NewSampler returns a Sampler; register it on a prometheus.Registerer and
// start Run.
func NewSampler(cfg SamplerConfig) (*Sampler, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	labels := []string{"gpu"}
	return &Sampler{
		cfg:       cfg,
		util:      prometheus.NewDesc("inferq_gpu_utilization_ratio", "Fraction of the last sample period during which the GPU was busy (NVML).", labels, nil),
		used:      prometheus.NewDesc("inferq_gpu_memory_used_bytes", "GPU memory in use, all processes (NVML).", labels, nil),
		total:     prometheus.NewDesc("inferq_gpu_memory_total_bytes", "GPU memory installed (NVML).", labels, nil),
		sampleErr: map[int]bool{},
	}, nil
}

// Run initialises NVML, samples every GPU at once and then every interval
// until ctx ends, and shuts NVML down. It returns nil when ctx ends; an
// error wrapping ErrNoGPU when NVML cannot start or reports no GPU (no
// device call follows a failed Init); another error when a GPU cannot be
// listed at start.
func (s *Sampler) Run(ctx context.Context) error {
	lib := s.cfg.Library
	_, handles, idents, err := attach(lib)
	if err != nil {
		return err
	}
	defer lib.Shutdown()
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.sampleAll(handles, idents)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// sampleAll reads every GPU once and publishes the answering ones.
func (s *Sampler) sampleAll(handles []nvml.Device, idents []Device) {
	out := make([]Device, 0, len(handles))
	failed := map[int]error{}
	for i, h := range handles {
		d := idents[i]
		if err := sample(&d, h); err != nil {
			failed[i] = err
			continue
		}
		out = append(out, d)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range handles {
		err, bad := failed[i]
		switch {
		case bad && !s.sampleErr[i]:
			s.cfg.Logger.Warn("gpu sample failed; its metrics are left out until it answers", "gpu", i, "err", err)
		case !bad && s.sampleErr[i]:
			s.cfg.Logger.Info("gpu answers again", "gpu", i)
		}
		s.sampleErr[i] = bad
	}
	s.devices, s.sampled = out, true
}

// Devices returns the last sample of the GPUs that answered, and whether a
// sample was taken yet. Safe for concurrent use.
func (s *Sampler) Devices() ([]Device, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Device(nil), s.devices...), s.sampled
}

// Describe implements prometheus.Collector.
func (s *Sampler) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.util
	ch <- s.used
	ch <- s.total
}

// Collect implements prometheus.Collector with the last sample; it calls
// no NVML function.
func (s *Sampler) Collect(ch chan<- prometheus.Metric) {
	devs, _ := s.Devices()
	for _, d := range devs {
		gpu := strconv.Itoa(d.Index)
		if d.Utilization >= 0 {
			ch <- prometheus.MustNewConstMetric(s.util, prometheus.GaugeValue, d.Utilization, gpu)
		}
		ch <- prometheus.MustNewConstMetric(s.used, prometheus.GaugeValue, float64(d.MemoryUsed), gpu)
		ch <- prometheus.MustNewConstMetric(s.total, prometheus.GaugeValue, float64(d.MemoryTotal), gpu)
	}
}
