package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestBenchSummarize(t *testing.T) {
	var lat []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	got := summarize(lat)
	want := LatencyStats{P50: 50, P95: 95, P99: 99, Mean: 50.5, Max: 100}
	if got != want {
		t.Errorf("summarize 1..100 ms = %+v, want %+v", got, want)
	}
	if got := summarize(nil); got != (LatencyStats{}) {
		t.Errorf("summarize(nil) = %+v", got)
	}
	one := summarize([]time.Duration{3 * time.Millisecond})
	if one.P50 != 3 || one.P99 != 3 || one.Max != 3 {
		t.Errorf("one sample: %+v", one)
	}
}

func TestBenchMedianSpreadRatio(t *testing.T) {
	nan := math.NaN()
	same := func(a, b float64) bool { return a == b || (math.IsNaN(a) && math.IsNaN(b)) || math.Abs(a-b) < 1e-9 }
	for _, tt := range []struct {
		name           string
		v              []float64
		median, spread float64
	}{
		{"none", nil, nan, nan},
		{"one", []float64{7}, 7, 0},
		{"odd", []float64{30, 10, 20}, 20, 1},
		{"even", []float64{4, 1, 3, 2}, 2.5, 1.2},
		{"zero median", []float64{0, 0, 1}, 0, nan},
	} {
		in := append([]float64(nil), tt.v...)
		if m := median(tt.v); !same(m, tt.median) {
			t.Errorf("%s: median %v, want %v", tt.name, m, tt.median)
		}
		if s := spread(tt.v); !same(s, tt.spread) {
			t.Errorf("%s: spread %v, want %v", tt.name, s, tt.spread)
		}
		for i := range in {
			if in[i] != tt.v[i] {
				t.Errorf("%s: input changed", tt.name)
			}
		}
	}
	for _, tt := range []struct{ a, b, want float64 }{
		{30, 10, 3}, {5, 0, nan}, {nan, 2, nan}, {2, nan, nan}, {0, 4, 0}, {1, -1, nan},
	} {
		if got := ratio(tt.a, tt.b); !same(got, tt.want) {
			t.Errorf("ratio(%v, %v) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestBenchReportRows(t *testing.T) {
	b := &bencher{cfg: Config{Producers: 1, Inflight: 1}, plan: &plan{binary: true}}
	r := &benchReport{b: b, groups: []string{"mlp/cpu"}}
	add := func(mode string, bs int, tps ...float64) {
		for i, v := range tps {
			r.add(Sample{Model: "mlp", Device: "cpu", Mode: mode, BatchSize: bs, Repeat: i + 1, TasksPerS: v, OK: 10, Duplicates: i,
				Latency: LatencyStats{P50: v / 1000, P99: v / 100}, Batches: 2, MeanBatch: float64(bs)})
		}
	}
	add(ModeQueue, 8, 900, 1100, 1000)
	add(ModeDirect, 8, 2000, 2000, 2000)
	add(ModeBroker, 0, 500, 500, 500)
	add(ModeDirect, 32, 4000, 4000, 4000)
	add(ModeAdapter, 1, 40, 40, 40)
	r.add(Sample{Model: "mlp", Device: "cpu", Mode: ModeQuery, BatchSize: 8, Unavailable: "not yet"})
	rows := r.rows()
	var order []string
	byMode := map[string]benchRow{}
	for _, x := range rows {
		order = append(order, x.Mode)
		byMode[fmt.Sprintf("%s/%d", x.Mode, x.BatchSize)] = x
	}
	if got := strings.Join(order, ","); got != "direct,direct,broker,queue,query,adapter" {
		t.Errorf("row order %s", got)
	}
	q := byMode["queue/8"]
	if q.Samples != 3 || q.TasksPerS != 1000 || math.Abs(q.Spread-0.2) > 1e-9 || q.P50 != 1 || q.OK != 30 || q.Duplicates != 3 {
		t.Errorf("queue row %+v", q)
	}
	if q.XDirect != 0.5 || q.XBroker != 2 {
		t.Errorf("queue ratios: x direct %v (want 0.5, same batch size), x broker %v (want 2)", q.XDirect, q.XBroker)
	}
	// Modes without a batcher compare to the best direct run.
	if ad := byMode["adapter/1"]; ad.XDirect != 0.01 || ad.XBroker != 0.08 {
		t.Errorf("adapter ratios %v %v", ad.XDirect, ad.XBroker)
	}
	if qu := byMode["query/8"]; qu.Unavailable == "" || !math.IsNaN(qu.TasksPerS) || !math.IsNaN(qu.XDirect) {
		t.Errorf("unavailable row %+v", qu)
	}
	if lines := r.ratiosLine(rows, "mlp/cpu"); len(lines) != 1 || lines[0] != "queue (b=8) is 25.0x adapter" {
		t.Errorf("ratios line %q", lines)
	}
}

func TestBenchDrive(t *testing.T) {
	ctx := context.Background()
	// Every task answered at once: a task count is sent exactly.
	var calls atomic.Int64
	res := drive(ctx, loadSpec{producers: 3, window: 8, chunk: 4, tasks: 100, drain: time.Second},
		func(ctx, wctx context.Context, p, n int, done func(error)) error {
			calls.Add(1)
			for range n {
				done(nil)
			}
			return nil
		})
	if res.Sent != 100 || res.OK != 100 || res.Errors != 0 || res.Lost != 0 || len(res.Latencies) != 100 || res.TasksPerSec <= 0 {
		t.Errorf("tasks: %+v", res)
	}
	// Answers never come for every third task: lost after the drain;
	// failures are counted as errors with their text.
	var n atomic.Int64
	res = drive(ctx, loadSpec{producers: 2, window: 4, chunk: 2, duration: 50 * time.Millisecond, drain: 50 * time.Millisecond},
		func(ctx, wctx context.Context, p, k int, done func(error)) error {
			for range k {
				switch n.Add(1) % 3 {
				case 0:
					go func() { <-wctx.Done(); done(errLost) }()
				case 1:
					done(errors.New("check: wrong shape"))
				default:
					done(nil)
				}
			}
			return nil
		})
	if res.Lost == 0 || res.Errors == 0 || res.OK == 0 || res.Sent != res.OK+res.Errors+res.Lost {
		t.Errorf("lost/errors: %+v", res)
	}
	if len(res.FirstErrors) == 0 || res.FirstErrors[0] != "check: wrong shape" {
		t.Errorf("first errors %q", res.FirstErrors)
	}
	// A send that fails counts its tasks as errors and never calls done.
	res = drive(ctx, loadSpec{producers: 1, window: 2, chunk: 2, tasks: 4, drain: time.Second},
		func(ctx, wctx context.Context, p, k int, done func(error)) error { return errors.New("broker away") })
	if res.Sent != 0 || res.Errors != 4 || !strings.Contains(strings.Join(res.FirstErrors, ";"), "broker away") {
		t.Errorf("send errors: %+v", res)
	}
}
