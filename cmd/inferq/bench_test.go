package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
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
	want := latencyStats{P50: 50, P95: 95, P99: 99, Mean: 50.5, Max: 100}
	if got != want {
		t.Errorf("summarize 1..100 ms = %+v, want %+v", got, want)
	}
	if got := summarize(nil); got != (latencyStats{}) {
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
	b := &bencher{f: benchFlags{producers: 1, inflight: 1}, plan: &benchPlan{binary: true}}
	r := &benchReport{b: b, groups: []string{"mlp/cpu"}}
	add := func(mode string, bs int, tps ...float64) {
		for i, v := range tps {
			r.add(benchSample{Model: "mlp", Device: "cpu", Mode: mode, BatchSize: bs, Repeat: i + 1, TasksPerS: v, OK: 10,
				Latency: latencyStats{P50: v / 1000, P99: v / 100}, Batches: 2, MeanBatch: float64(bs)})
		}
	}
	add(modeQueue, 8, 900, 1100, 1000)
	add(modeDirect, 8, 2000, 2000, 2000)
	add(modeBroker, 0, 500, 500, 500)
	add(modeDirect, 32, 4000, 4000, 4000)
	add(modeAdapter, 1, 40, 40, 40)
	r.add(benchSample{Model: "mlp", Device: "cpu", Mode: modeQuery, BatchSize: 8, Unavailable: "not yet"})
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
	if q.Samples != 3 || q.TasksPerS != 1000 || math.Abs(q.Spread-0.2) > 1e-9 || q.P50 != 1 || q.OK != 30 {
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

func TestBenchFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		err  string
	}{
		{[]string{"--modes", "direct,warp"}, `unknown mode "warp"`},
		{[]string{"--batch-sizes", "1,x"}, `"x" is not a positive integer`},
		{[]string{"--payload", "xml"}, "want json or binary"},
		{[]string{"--tasks", "0"}, "--tasks 0"},
		{[]string{"--plot", "out.svg"}, "want a .png file"},
		{[]string{"--idle-model", "mlp"}, "also a --model"},
		{[]string{"--model", "bert"}, "only the example models"},
	} {
		a, _, errb := testApp(nil)
		code := a.main(context.Background(), append([]string{"bench"}, tt.args...))
		if code != 2 || !strings.Contains(errb.String(), tt.err) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tt.args, code, errb.String(), tt.err)
		}
	}
}

// TestBenchRun runs every mode briefly on the embedded broker and checks
// the report's shape, not its speed.
func TestBenchRun(t *testing.T) {
	env := ortEnv(t)
	dir := t.TempDir()
	jsonPath, plotPath := filepath.Join(dir, "out.json"), filepath.Join(dir, "out.png")
	a, out, errb := testApp(env)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := a.main(ctx, []string{"bench", "--models-dir", filepath.Join(dir, "models"), "--modes", "direct,broker,queue,query,adapter",
		"--duration", "300ms", "--warmup", "0s", "--batch-sizes", "4,16", "--producers", "2", "--inflight", "16", "--send-batch", "8",
		"--adapter-max-tasks", "20", "--idle-model", "multitype", "--json", jsonPath, "--plot", plotPath})
	t.Logf("exit %d\n%s\n%s", code, out, errb)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	queryMissing := strings.HasPrefix(last, "INCOMPLETE: mlp/cpu query: query mode not available yet")
	switch {
	case queryMissing && code == 1:
	case strings.HasPrefix(last, "OK: ") && code == 0:
	default:
		t.Fatalf("exit %d, last line %q", code, last)
	}
	for _, want := range []string{"mlp/cpu", "tasks/s", "x direct", "idle models served beside the busy one: multitype", "x adapter"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	var rep struct {
		Rows []struct {
			Mode      string   `json:"mode"`
			BatchSize int      `json:"batch_size"`
			Rate      *float64 `json:"tasks_per_second"`
			XDirect   *float64 `json:"x_direct"`
			Lost      int      `json:"lost"`
			Errors    int      `json:"errors"`
		} `json:"rows"`
		Samples []benchSample `json:"samples"`
	}
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	var modes []string
	for _, x := range rep.Rows {
		modes = append(modes, fmt.Sprintf("%s:%d", x.Mode, x.BatchSize))
		if x.Mode == modeQuery && queryMissing {
			continue
		}
		if x.Rate == nil || *x.Rate <= 0 || x.Lost != 0 || x.Errors != 0 {
			t.Errorf("row %+v", x)
		}
		if x.Mode == modeDirect && (x.XDirect == nil || *x.XDirect != 1) {
			t.Errorf("direct row's x direct %v", x.XDirect)
		}
	}
	// direct and queue (and query) per batch size; broker and adapter once.
	if got := strings.Join(modes, ","); got != "direct:4,direct:16,broker:0,queue:4,queue:16,query:4,query:16,adapter:1" {
		t.Errorf("rows %s", got)
	}
	if len(rep.Samples) != 8 {
		t.Errorf("%d samples, want 8", len(rep.Samples))
	}
	for _, s := range rep.Samples {
		if s.Unavailable == "" && (len(s.LatenciesUS) != min(s.OK, maxJSONLatencies) || s.OK == 0 || s.Usage.RSSMax == 0 || s.Latency.P99 < s.Latency.P50) {
			t.Errorf("sample %s b=%d: %d latencies for %d ok, usage %+v, latency %+v", s.Mode, s.BatchSize, len(s.LatenciesUS), s.OK, s.Usage, s.Latency)
		}
		if (s.Mode == modeQueue || s.Mode == modeDirect) && (s.Batches == 0 || s.MeanBatch < 1 || s.MeanBatch > float64(s.BatchSize)) {
			t.Errorf("sample %s b=%d: %d batches of %.1f rows", s.Mode, s.BatchSize, s.Batches, s.MeanBatch)
		}
	}
	if st, err := os.Stat(plotPath); err != nil || st.Size() < 1000 {
		t.Errorf("plot: %v", err)
	}
}
