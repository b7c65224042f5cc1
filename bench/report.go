package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/inferq/inferq/models"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// benchRow is the samples of one model, device, mode and batch size,
// summarised: medians over --repeat, and the spread of the rate.
type benchRow struct {
	Model       string  `json:"model"`
	Device      string  `json:"device"`
	Mode        string  `json:"mode"`
	BatchSize   int     `json:"batch_size"`
	Samples     int     `json:"samples"`
	TasksPerS   float64 `json:"tasks_per_second"`
	Spread      float64 `json:"tasks_per_second_spread"`
	P50         float64 `json:"latency_p50_ms"`
	P95         float64 `json:"latency_p95_ms"`
	P99         float64 `json:"latency_p99_ms"`
	MeanBatch   float64 `json:"mean_batch_rows"`
	CPUCores    float64 `json:"cpu_cores"`
	RSSMax      uint64  `json:"rss_max_bytes"`
	RSSGrowth   uint64  `json:"rss_growth_bytes"`
	XDirect     float64 `json:"x_direct"`
	XBroker     float64 `json:"x_broker"`
	OK          int     `json:"ok"`
	Errors      int     `json:"errors"`
	Lost        int     `json:"lost"`
	Duplicates  int     `json:"duplicates"`
	Unavailable string  `json:"unavailable,omitempty"`
}

// benchReport collects the samples of a run and writes the table, the
// JSON file and the plot.
type benchReport struct {
	b       *bencher
	groups  []string // model/device, in run order
	samples []Sample
	// shapes and checks say, per busy model, what its tasks send and
	// what the checks verify of its results.
	shapes, checks []string
}

func newBenchReport(b *bencher, busy, _ []*benchModel) *benchReport {
	r := &benchReport{b: b}
	var names []string
	for _, m := range busy {
		r.groups = append(r.groups, m.cfg.Name+"/"+m.device)
		if !slices.Contains(names, m.cfg.Name) {
			names = append(names, m.cfg.Name)
			r.shapes = append(r.shapes, m.shape.describe())
			r.checks = append(r.checks, fmt.Sprintf("%s's outputs %s", m.cfg.Name, m.check.describe()))
		}
	}
	return r
}

func (r *benchReport) add(s Sample) { r.samples = append(r.samples, s) }

// rows aggregates the samples, in run order, with the ratios filled in.
func (r *benchReport) rows() []benchRow {
	type key struct {
		model, device, mode string
		bs                  int
	}
	var order []key
	by := map[key][]Sample{}
	for _, s := range r.samples {
		k := key{s.Model, s.Device, s.Mode, s.BatchSize}
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], s)
	}
	slices.SortStableFunc(order, func(a, b key) int {
		if a.model != b.model || a.device != b.device {
			return 0
		}
		if d := slices.Index(allModes, a.mode) - slices.Index(allModes, b.mode); d != 0 {
			return d
		}
		return a.bs - b.bs
	})
	rows := make([]benchRow, 0, len(order))
	for _, k := range order {
		rows = append(rows, summarizeRow(benchRow{Model: k.model, Device: k.device, Mode: k.mode, BatchSize: k.bs}, by[k]))
	}
	setRatios(rows)
	return rows
}

// summarizeRow fills row from its samples: sums of the counts, medians
// of the rates, latencies, fill and CPU, the largest RSS.
func summarizeRow(row benchRow, ss []Sample) benchRow {
	var tps, p50, p95, p99, fill, cpu []float64
	for _, s := range ss {
		row.OK, row.Errors, row.Lost, row.Duplicates = row.OK+s.OK, row.Errors+s.Errors, row.Lost+s.Lost, row.Duplicates+s.Duplicates
		if s.Unavailable != "" {
			row.Unavailable = s.Unavailable
			continue
		}
		row.Samples++
		tps = append(tps, s.TasksPerS)
		p50, p95, p99 = append(p50, s.Latency.P50), append(p95, s.Latency.P95), append(p99, s.Latency.P99)
		if s.Batches > 0 {
			fill = append(fill, s.MeanBatch)
		}
		cpu = append(cpu, s.Usage.CPUCores)
		row.RSSMax = max(row.RSSMax, s.Usage.RSSMax)
		if s.Usage.RSSMax > s.Usage.RSSStart {
			row.RSSGrowth = max(row.RSSGrowth, s.Usage.RSSMax-s.Usage.RSSStart)
		}
	}
	row.TasksPerS, row.Spread = median(tps), spread(tps)
	row.P50, row.P95, row.P99 = median(p50), median(p95), median(p99)
	row.MeanBatch, row.CPUCores = median(fill), median(cpu)
	return row
}

// setRatios sets each row's rate against direct (same batch size, or the
// best direct run for the modes without a batcher) and against broker.
func setRatios(rows []benchRow) {
	find := func(model, device, mode string, bs int) float64 {
		best := math.NaN()
		for _, x := range rows {
			if x.Model == model && x.Device == device && x.Mode == mode && (bs < 0 || x.BatchSize == bs) && !math.IsNaN(x.TasksPerS) {
				if math.IsNaN(best) || x.TasksPerS > best {
					best = x.TasksPerS
				}
			}
		}
		return best
	}
	for i := range rows {
		x := &rows[i]
		bs := x.BatchSize
		if !batchBound(x.Mode) {
			bs = -1 // against the best direct run
		}
		x.XDirect = ratio(x.TasksPerS, find(x.Model, x.Device, ModeDirect, bs))
		x.XBroker = ratio(x.TasksPerS, find(x.Model, x.Device, ModeBroker, -1))
	}
}

func fnum(v float64, prec int) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

func frate(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// write prints the tables, the targets and the verdict line to w, writes
// the JSON and the plot, and returns an error when a task was lost or
// failed its check, or a mode could not run.
func (r *benchReport) write(w io.Writer) error {
	rows := r.rows()
	r.writeHeader(w)
	for _, g := range r.groups {
		if err := r.writeGroup(w, rows, g); err != nil {
			return err
		}
	}
	if t := r.targets(rows); len(t) > 0 {
		fmt.Fprintf(w, "\ntargets (issue 7; stated for this 2-core machine and the embedded broker):\n")
		for _, line := range t {
			fmt.Fprintf(w, "  %s\n", line)
		}
	}
	errs := r.writeFiles(w, rows)
	return errors.Join(append(errs, r.verdict(w))...)
}

// writeHeader prints the run's parameters and the machine.
func (r *benchReport) writeHeader(w io.Writer) {
	b := r.b
	where := "embedded broker (in process)"
	if !b.embedded {
		where = "broker " + b.addr
	}
	load := fmt.Sprintf("%d producers x %d in flight, sends of %d", b.cfg.Producers, b.cfg.Inflight, b.cfg.SendBatch)
	length := fmt.Sprintf("%v per sample after %v warm-up", b.cfg.Duration, b.cfg.Warmup)
	if b.cfg.Tasks > 0 {
		length = fmt.Sprintf("%d tasks per sample after %v warm-up", b.cfg.Tasks, b.cfg.Warmup)
	}
	fmt.Fprintf(w, "inferq bench: %s, %s payload, %s, %s, %d repeat(s), %d server(s) with --queue-shards %d, producers sending to %s\n",
		where, b.cfg.Payload, load, length, b.cfg.Repeat, b.cfg.Servers, b.cfg.ServerShardCount(), producersTo(b.cfg.QueueShards))
	fmt.Fprintf(w, "machine: %d CPUs (%s), %s, %s/%s; CPU and RSS are this process's (server, producers%s); +rss: grown during the sample\n",
		goruntime.NumCPU(), cpuModel(), fmtBytes(memTotal()), goruntime.GOOS, goruntime.GOARCH, map[bool]string{true: ", broker", false: ""}[b.embedded])
	fmt.Fprintf(w, "inputs per task (a dynamic dim 0 is the batch dim: one row per task, the batcher makes the batches): %s\n", strings.Join(r.shapes, "; "))
	if slices.Contains(b.plan.modes, ModeHTTP) || slices.Contains(b.plan.modes, ModeGRPC) {
		fmt.Fprintf(w, "http and grpc servers: max_concurrent_requests %d each (%s)\n", oipLimit(b.cfg.Producers*b.cfg.Inflight), oipCapWhy(b.cfg.Producers*b.cfg.Inflight))
	}
	if len(b.cfg.Idle) > 0 {
		fmt.Fprintf(w, "idle models served beside the busy one: %s\n", strings.Join(b.cfg.Idle, ", "))
	}
	if !b.cfg.SimLatency.IsZero() {
		l := b.cfg.SimLatency
		fmt.Fprintf(w, "simulated accelerator (--sim-latency %s): each run takes at least %v + %v x rows (%v for 64 rows), one run at a time per instance and server; the model still runs on the CPU\n",
			l, l.Base, l.PerRow, l.For(64))
	}
	if d := b.cfg.MaxQueueDelay; d > 0 {
		fmt.Fprintf(w, "batching.max_queue_delay %v for every model (--max-queue-delay)\n", d)
	}
}

// oipCapWhy says where the servers' max_concurrent_requests comes from.
func oipCapWhy(callers int) string {
	if oipLimit(callers) == models.DefaultHTTPMaxConcurrentRequests {
		return "serve's default"
	}
	return fmt.Sprintf("raised from serve's default %d to the load, producers x in flight, so that none is refused", models.DefaultHTTPMaxConcurrentRequests)
}

// writeGroup prints the table of one model/device group, why its
// unavailable modes did not run, and its ratios.
func (r *benchReport) writeGroup(w io.Writer, rows []benchRow, g string) error {
	fmt.Fprintf(w, "\n%s\n", g)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tbatch\ttasks/s\tspread\tp50 ms\tp95 ms\tp99 ms\tfill\tcpu\trss MiB\t+rss\tx direct\tx broker\tok\terrors\tlost\tdup\t")
	for _, x := range rows {
		if x.Model+"/"+x.Device == g {
			writeRow(tw, x)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, x := range rows {
		if x.Model+"/"+x.Device == g && x.Unavailable != "" {
			fmt.Fprintf(w, "  %s: %s\n", x.Mode, x.Unavailable)
		}
	}
	for _, line := range r.ratiosLine(rows, g) {
		fmt.Fprintf(w, "  %s\n", line)
	}
	for _, s := range r.samples {
		if s.Model+"/"+s.Device == g && len(s.ServerRows) > 1 {
			fmt.Fprintf(w, "  %s\n", sharesLine(s))
		}
	}
	return nil
}

// sharesLine says how a sample's rows split over its servers.
func sharesLine(s Sample) string {
	var total int64
	for _, n := range s.ServerRows {
		total += n
	}
	parts := make([]string, len(s.ServerRows))
	for i, n := range s.ServerRows {
		parts[i] = fmt.Sprintf("server %d %d (%.0f%%)", i, n, 100*float64(n)/float64(max(total, 1)))
	}
	return fmt.Sprintf("%s batch %d repeat %d: rows per server: %s", s.Mode, s.BatchSize, s.Repeat, strings.Join(parts, ", "))
}

// writeRow prints one row of a group's table.
func writeRow(tw io.Writer, x benchRow) {
	batch := "-"
	if x.BatchSize > 0 {
		batch = fmt.Sprint(x.BatchSize)
	}
	if x.Unavailable != "" {
		fmt.Fprintf(tw, "%s\t%s\t%s\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\n", x.Mode, batch, "n/a")
		return
	}
	fill := "-"
	if !math.IsNaN(x.MeanBatch) && x.BatchSize > 0 {
		fill = fmt.Sprintf("%.1f/%d", x.MeanBatch, x.BatchSize)
	}
	sp := "-"
	if x.Samples > 1 {
		sp = fmt.Sprintf("±%.0f%%", 50*x.Spread)
	}
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t%.0f\t%s\t%s\t%d\t%d\t%d\t%d\t\n",
		x.Mode, batch, frate(x.TasksPerS), sp, fnum(x.P50, 2), fnum(x.P95, 2), fnum(x.P99, 2), fill,
		fnum(x.CPUCores, 2), float64(x.RSSMax)/(1<<20), float64(x.RSSGrowth)/(1<<20), fnum(x.XDirect, 2), fnum(x.XBroker, 2), x.OK, x.Errors, x.Lost, x.Duplicates)
}

// writeFiles writes the JSON file and the plot when asked for.
func (r *benchReport) writeFiles(w io.Writer, rows []benchRow) []error {
	var errs []error
	if p := r.b.cfg.JSONPath; p != "" {
		if err := r.writeJSON(p, rows); err != nil {
			errs = append(errs, fmt.Errorf("--json: %w", err))
		} else {
			fmt.Fprintf(w, "\nsamples written to %s\n", p)
		}
	}
	if p := r.b.cfg.PlotPath; p != "" {
		if err := r.plot(p, rows); err != nil {
			errs = append(errs, fmt.Errorf("--plot: %w", err))
		} else {
			fmt.Fprintf(w, "plot written to %s\n", p)
		}
	}
	return errs
}

// verdict prints the last line (OK, INCOMPLETE or FAIL) and returns the
// run's error.
func (r *benchReport) verdict(w io.Writer) error {
	ok, bad, lost, sent := 0, 0, 0, 0
	var firstErr, unavailable string
	var lostIn []string
	for _, s := range r.samples {
		ok, bad, lost, sent = ok+s.OK, bad+s.Errors, lost+s.Lost, sent+s.Sent
		if firstErr == "" && len(s.Errs) > 0 {
			firstErr = fmt.Sprintf("%s/%s %s b=%d: %s", s.Model, s.Device, s.Mode, s.BatchSize, s.Errs[0])
		}
		if s.Lost > 0 {
			lostIn = append(lostIn, fmt.Sprintf("%d in %s/%s %s b=%d", s.Lost, s.Model, s.Device, s.Mode, s.BatchSize))
		}
		if s.Unavailable != "" && unavailable == "" {
			unavailable = fmt.Sprintf("%s/%s %s: %s", s.Model, s.Device, s.Mode, s.Unavailable)
		}
	}
	fmt.Fprintln(w)
	switch {
	case lost > 0:
		fmt.Fprintf(w, "FAIL: %d of %d tasks LOST (%s); %d verified, %d errors\n", lost, sent, strings.Join(lostIn, ", "), ok, bad)
		return fmt.Errorf("%d tasks lost", lost)
	case bad > 0:
		fmt.Fprintf(w, "FAIL: %d tasks failed or failed their check (first: %s); %d verified, 0 lost\n", bad, firstErr, ok)
		return fmt.Errorf("%d tasks failed", bad)
	case unavailable != "":
		fmt.Fprintf(w, "INCOMPLETE: %s; %d results verified, 0 errors, 0 lost\n", unavailable, ok)
		return errors.New("a mode could not run")
	}
	fmt.Fprintf(w, "OK: %d results verified (task id and SUCCESS where queued; %s), 0 errors, 0 lost\n", ok, strings.Join(r.checks, "; "))
	return nil
}

// ratiosLine states queue against adapter for a group, the comparison
// the batching and pipelining are for.
func (r *benchReport) ratiosLine(rows []benchRow, g string) []string {
	best := func(mode string) (float64, int) {
		v, bs := math.NaN(), 0
		for _, x := range rows {
			if x.Model+"/"+x.Device == g && x.Mode == mode && !math.IsNaN(x.TasksPerS) && (math.IsNaN(v) || x.TasksPerS > v) {
				v, bs = x.TasksPerS, x.BatchSize
			}
		}
		return v, bs
	}
	q, qbs := best(ModeQueue)
	ad, _ := best(ModeAdapter)
	if math.IsNaN(q) || math.IsNaN(ad) {
		return nil
	}
	return []string{fmt.Sprintf("queue (b=%d) is %.1fx adapter", qbs, q/ad)}
}

// targets reports the targets that this run measured.
func (r *benchReport) targets(rows []benchRow) []string {
	var out []string
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	get := func(model, mode string, bs int) *benchRow {
		var best *benchRow
		for i := range rows {
			x := &rows[i]
			if x.Model == model && x.Mode == mode && (bs < 0 || x.BatchSize == bs) && !math.IsNaN(x.TasksPerS) &&
				(best == nil || x.TasksPerS > best.TasksPerS) {
				best = x
			}
		}
		return best
	}
	light := r.b.cfg.Producers*r.b.cfg.Inflight == 1
	if q := get("mlp", ModeQueue, -1); q != nil {
		if !light {
			out = append(out, fmt.Sprintf("mlp queue >= 15000 tasks/s: %.0f at b=%d on %s: %s", q.TasksPerS, q.BatchSize, q.Device, verdict(q.TasksPerS >= 15000)))
		}
		if ad := get("mlp", ModeAdapter, -1); ad != nil && !light {
			x := q.TasksPerS / ad.TasksPerS
			out = append(out, fmt.Sprintf("mlp queue >= 25x adapter: %.1fx: %s", x, verdict(x >= 25)))
		}
		if light {
			out = append(out, fmt.Sprintf("light-load p50 <= 3 ms (mlp queue, one task at a time): %.2f ms: %s", q.P50, verdict(q.P50 <= 3)))
		} else {
			out = append(out, "light-load p50 <= 3 ms: measured with --producers 1 --inflight 1 (see BENCHMARKS.md)")
		}
	}
	if r.b.plan.binary {
		for _, x := range rows {
			if x.Model == "resnet18" && x.Mode == ModeQueue && !math.IsNaN(x.XDirect) {
				out = append(out, fmt.Sprintf("resnet18 queue (binary) >= 0.9x direct: %.2fx at b=%d on %s: %s", x.XDirect, x.BatchSize, x.Device, verdict(x.XDirect >= 0.9)))
			}
		}
	}
	return out
}

func fmtBytes(n uint64) string {
	if n == 0 {
		return "memory unknown"
	}
	return fmt.Sprintf("%.1f GiB memory", float64(n)/(1<<30))
}

// benchJSON is the --json file.
type benchJSON struct {
	Started time.Time      `json:"started"`
	Machine map[string]any `json:"machine"`
	Params  map[string]any `json:"params"`
	Rows    []jsonRow      `json:"rows"`
	Samples []Sample       `json:"samples"`
}

// jsonRow is a benchRow whose NaNs (no such ratio) are nulls.
type jsonRow struct {
	benchRow
	Spread  *float64 `json:"tasks_per_second_spread"`
	XDirect *float64 `json:"x_direct"`
	XBroker *float64 `json:"x_broker"`
	P50     *float64 `json:"latency_p50_ms"`
	P95     *float64 `json:"latency_p95_ms"`
	P99     *float64 `json:"latency_p99_ms"`
	Fill    *float64 `json:"mean_batch_rows"`
	CPU     *float64 `json:"cpu_cores"`
	Rate    *float64 `json:"tasks_per_second"`
}

func nullable(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func (r *benchReport) writeJSON(path string, rows []benchRow) error {
	b := r.b
	out := benchJSON{
		Started: time.Now(),
		Machine: map[string]any{"cpus": goruntime.NumCPU(), "cpu_model": cpuModel(), "memory_bytes": memTotal(),
			"os": goruntime.GOOS, "arch": goruntime.GOARCH, "go": goruntime.Version()},
		Params: map[string]any{"broker": b.addr, "embedded_broker": b.embedded, "modes": b.plan.modes, "models": b.cfg.Models,
			"idle_models": b.cfg.Idle, "payload": b.cfg.Payload, "producers": b.cfg.Producers, "inflight": b.cfg.Inflight,
			"send_batch": b.cfg.SendBatch, "duration_s": b.cfg.Duration.Seconds(), "tasks": b.cfg.Tasks, "warmup_s": b.cfg.Warmup.Seconds(),
			"repeat": b.cfg.Repeat, "servers": b.cfg.Servers, "adapter_max_tasks": b.cfg.AdapterMax, "sim_latency": b.cfg.SimLatency.String(), "max_queue_delay_s": b.cfg.MaxQueueDelay.Seconds(),
			"shapes": b.cfg.Shapes, "inputs_per_task": r.shapes, "oip_max_concurrent_requests": oipLimit(b.cfg.Producers * b.cfg.Inflight)},
		Samples: r.samples,
	}
	for _, x := range rows {
		out.Rows = append(out.Rows, jsonRow{benchRow: x, Spread: nullable(x.Spread), XDirect: nullable(x.XDirect), XBroker: nullable(x.XBroker),
			P50: nullable(x.P50), P95: nullable(x.P95), P99: nullable(x.P99), Fill: nullable(x.MeanBatch), CPU: nullable(x.CPUCores),
			Rate: nullable(x.TasksPerS)})
	}
	for i := range out.Samples {
		if out.Samples[i].LatenciesUS == nil {
			out.Samples[i].LatenciesUS = []int64{}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	if err := enc.Encode(out); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// plot draws two panels, throughput and p99 latency against
// max_batch_size, one line per model/device and mode; the modes without a
// batcher (broker, adapter) are dashed horizontal lines.
func (r *benchReport) plot(path string, rows []benchRow) error {
	tp, lp := plot.New(), plot.New()
	tp.Title.Text, lp.Title.Text = "throughput", "p99 latency"
	tp.Y.Label.Text, lp.Y.Label.Text = "tasks/s", "ms"
	for _, p := range []*plot.Plot{tp, lp} {
		p.X.Label.Text = "max_batch_size"
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Legend.Top, p.Legend.Left = true, true
		p.Add(plotter.NewGrid())
	}
	lo, hi, ticks := batchAxis(rows)
	if len(ticks) > 0 {
		tp.X.Tick.Marker, lp.X.Tick.Marker = plot.ConstantTicks(ticks), plot.ConstantTicks(ticks)
	}
	series := 0
	for _, g := range r.groups {
		for _, mode := range allModes {
			tps, p99 := modeLine(rows, g, mode, lo, hi)
			if len(tps) == 0 {
				continue
			}
			name := mode
			if len(r.groups) > 1 {
				name = g + " " + mode
			}
			for i, pl := range []*plot.Plot{tp, lp} {
				if err := addLine(pl, []plotter.XYs{tps, p99}[i], name, series, batchBound(mode)); err != nil {
					return err
				}
			}
			series++
		}
	}
	for _, p := range []*plot.Plot{tp, lp} {
		p.Y.Max *= 4 // room for the legend above the lines
		p.Y.Min /= 1.5
	}
	return savePNG(path, tp, lp)
}

// batchAxis returns the x range and ticks: the swept batch sizes.
func batchAxis(rows []benchRow) (lo, hi float64, ticks []plot.Tick) {
	var sizes []float64
	for _, x := range rows {
		if batchBound(x.Mode) && !slices.Contains(sizes, float64(x.BatchSize)) {
			sizes = append(sizes, float64(x.BatchSize))
		}
	}
	slices.Sort(sizes)
	lo, hi = 1.0, 64.0
	if len(sizes) > 0 {
		lo, hi = sizes[0], sizes[len(sizes)-1]
	}
	if lo == hi {
		lo, hi = lo/2, hi*2
	}
	for _, s := range sizes {
		ticks = append(ticks, plot.Tick{Value: s, Label: fmt.Sprint(s)})
	}
	return lo, hi, ticks
}

// modeLine returns the throughput and p99 points of one group's mode: one
// per batch size, or a flat line from lo to hi for a mode without a batcher.
func modeLine(rows []benchRow, g, mode string, lo, hi float64) (tps, p99 plotter.XYs) {
	for _, x := range rows {
		if x.Model+"/"+x.Device != g || x.Mode != mode || math.IsNaN(x.TasksPerS) || x.TasksPerS <= 0 {
			continue
		}
		if batchBound(mode) {
			tps = append(tps, plotter.XY{X: float64(x.BatchSize), Y: x.TasksPerS})
			p99 = append(p99, plotter.XY{X: float64(x.BatchSize), Y: max(x.P99, 0.01)})
		} else {
			tps = append(tps, plotter.XY{X: lo, Y: x.TasksPerS}, plotter.XY{X: hi, Y: x.TasksPerS})
			p99 = append(p99, plotter.XY{X: lo, Y: max(x.P99, 0.01)}, plotter.XY{X: hi, Y: max(x.P99, 0.01)})
		}
	}
	return tps, p99
}

// addLine draws xys on pl in the series' color and shape, dashed when
// the mode has no batcher.
func addLine(pl *plot.Plot, xys plotter.XYs, name string, series int, batched bool) error {
	l, s, err := plotter.NewLinePoints(xys)
	if err != nil {
		return err
	}
	c := plotutil.Color(series)
	l.Color, s.Color = c, c
	s.Shape = plotutil.Shape(series)
	if !batched {
		l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		s.Radius = 0
	}
	pl.Add(l, s)
	pl.Legend.Add(name, l, s)
	return nil
}

// savePNG draws the two panels side by side into path.
func savePNG(path string, tp, lp *plot.Plot) error {
	img := vgimg.New(vg.Points(900), vg.Points(420))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Points(20), PadY: vg.Points(10), PadTop: vg.Points(10), PadBottom: vg.Points(10), PadLeft: vg.Points(10), PadRight: vg.Points(10)}
	cs := plot.Align([][]*plot.Plot{{tp, lp}}, tiles, dc)
	tp.Draw(cs[0][0])
	lp.Draw(cs[0][1])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// benchProgress is the progress bar on stderr, shown only when stderr is a
// terminal. Its methods are safe for concurrent use and do nothing when
// the bar is off.
type benchProgress struct {
	bar   *progressbar.ProgressBar
	mu    sync.Mutex
	desc  string
	tasks atomic.Int64
	stop  chan struct{}
	wg    sync.WaitGroup
}

func newBenchProgress(w io.Writer, samples int) *benchProgress {
	p := &benchProgress{stop: make(chan struct{})}
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return p
	}
	p.bar = progressbar.NewOptions(samples,
		progressbar.OptionSetWriter(w), progressbar.OptionShowCount(), progressbar.OptionSetWidth(24),
		progressbar.OptionSetPredictTime(true), progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(), progressbar.OptionSetElapsedTime(true))
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.mu.Lock()
				d := p.desc
				p.mu.Unlock()
				p.bar.Describe(fmt.Sprintf("%s: %d tasks", d, p.tasks.Load()))
			}
		}
	}()
	return p
}

func (p *benchProgress) describe(d string) {
	p.mu.Lock()
	p.desc = d
	p.mu.Unlock()
	p.tasks.Store(0)
}

func (p *benchProgress) add(n int) { p.tasks.Add(int64(n)) }

func (p *benchProgress) step() {
	if p.bar != nil {
		_ = p.bar.Add(1)
	}
}

func (p *benchProgress) finish() {
	if p.bar == nil {
		return
	}
	close(p.stop)
	p.wg.Wait()
	_ = p.bar.Finish()
	_ = p.bar.Clear()
}

// producersTo says where the queue mode's producers send.
func producersTo(shards int) string {
	if shards > 1 {
		return fmt.Sprintf("%d shards (task ids hashed)", shards)
	}
	return "the queue's own name"
}
