package bench

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// LatencyStats summarises the latencies of one sample, in milliseconds.
type LatencyStats struct {
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	Mean float64 `json:"mean"`
	Max  float64 `json:"max"`
}

// summarize sorts lat in place and returns its percentiles (nearest rank,
// as inferq infer reports them) and mean.
func summarize(lat []time.Duration) LatencyStats {
	if len(lat) == 0 {
		return LatencyStats{}
	}
	slices.Sort(lat)
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	return LatencyStats{
		P50: Millis(Quantile(lat, 0.50)), P95: Millis(Quantile(lat, 0.95)), P99: Millis(Quantile(lat, 0.99)),
		Mean: Millis(sum / time.Duration(len(lat))), Max: Millis(lat[len(lat)-1]),
	}
}

// median returns the median of v (the mean of the middle two for an even
// count), NaN for none. v is not changed.
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// spread is (max - min) / median of v: 0 for one value, NaN for none or a
// zero median. It says how far --repeat samples disagree.
func spread(v []float64) float64 {
	m := median(v)
	if math.IsNaN(m) || m == 0 {
		return math.NaN()
	}
	return (slices.Max(v) - slices.Min(v)) / m
}

// ratio is a/b, NaN when either is missing (NaN) or b is not positive.
func ratio(a, b float64) float64 {
	if math.IsNaN(a) || math.IsNaN(b) || b <= 0 {
		return math.NaN()
	}
	return a / b
}

// Usage is the process's CPU time and RSS over one measured phase.
type Usage struct {
	// CPUCores is CPU seconds (user + system) per wall second: 2.0 is two
	// cores busy all the time.
	CPUCores float64 `json:"cpu_cores"`
	// RSSMax and RSSMean are sampled from /proc/self/statm every
	// resourceTick during the phase.
	RSSMax  uint64 `json:"rss_max_bytes"`
	RSSMean uint64 `json:"rss_mean_bytes"`
	// RSSStart is the RSS when the phase began: RSSMax - RSSStart is what
	// the phase added (the embedded broker keeps earlier samples' reply
	// events, so RSSMax alone carries the history of the run).
	RSSStart uint64 `json:"rss_start_bytes"`
}

const resourceTick = 100 * time.Millisecond

// resourceSampler measures the process from start to stop: getrusage for
// CPU, /proc/self/statm for RSS. One goroutine samples; stop returns the
// result and may be called once.
type resourceSampler struct {
	start   time.Time
	cpu0    time.Duration
	done    chan struct{}
	wg      sync.WaitGroup
	max     uint64
	first   uint64
	sum     uint64
	samples uint64
}

func startResources() *resourceSampler {
	r := &resourceSampler{start: time.Now(), cpu0: processCPU(), done: make(chan struct{})}
	r.sample()
	r.first = r.max
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTicker(resourceTick)
		defer t.Stop()
		for {
			select {
			case <-r.done:
				return
			case <-t.C:
				r.sample()
			}
		}
	}()
	return r
}

func (r *resourceSampler) sample() {
	rss := processRSS()
	r.max = max(r.max, rss)
	r.sum += rss
	r.samples++
}

func (r *resourceSampler) stop() Usage {
	close(r.done)
	r.wg.Wait()
	r.sample()
	wall := time.Since(r.start)
	u := Usage{RSSMax: r.max, RSSMean: r.sum / r.samples, RSSStart: r.first}
	if wall > 0 {
		u.CPUCores = (processCPU() - r.cpu0).Seconds() / wall.Seconds()
	}
	return u
}

// processCPU is the process's user + system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processRSS is the process's resident set in bytes (0 where /proc is
// missing).
func processRSS() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseUint(string(f[1]), 10, 64)
	if err != nil {
		return 0
	}
	return pages * uint64(os.Getpagesize())
}

// cpuModel is the CPU's model name from /proc/cpuinfo, for the report.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := bytes.Cut(s.Bytes(), []byte(":"))
		if ok && string(bytes.TrimSpace(k)) == "model name" {
			return string(bytes.TrimSpace(v))
		}
	}
	return ""
}

// memTotal is the machine's memory from /proc/meminfo, in bytes.
func memTotal() uint64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fs := bytes.Fields(s.Bytes())
		if len(fs) >= 2 && string(fs[0]) == "MemTotal:" {
			kb, _ := strconv.ParseUint(string(fs[1]), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// Millis is d in milliseconds, to the microsecond.
func Millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Quantile returns the q-quantile of sorted (nearest rank), 0 for none.
// `inferq infer` reports its percentiles with it too.
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
