package chaos

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
)

// rigOptions shape one scenario's inferq.
type rigOptions struct {
	// model is YAML lines added under the mlp model (4-space indent).
	model string
	// top is YAML added at the top level of the config.
	top string
	// http is YAML fields added to the http: section.
	http string
	// attempts is max_retries+1 of the model's config (default 4), for
	// the delivery bound.
	attempts int
	// proxyTLS serves the proxy with TLS; brokerTLS is then the YAML of
	// inferq's broker tls: section.
	proxyTLS  *tls.Config
	brokerTLS string
	// httpTLS is the client side of inferq's HTTPS; token its bearer token.
	httpTLS *tls.Config
	token   string
}

// rig is one scenario: a broker, the proxy in front of it, a direct
// connection for producing, reading records and draining the dead letter
// and unprocessable queues, the ledger, and the inferq processes started
// one after the other.
type rig struct {
	t     *testing.T
	h     *harness
	sz    sizes
	name  string
	ctx   context.Context
	dir   string
	opts  rigOptions
	start time.Time

	broker      *brokerTarget
	proxy       *proxy
	ctl         *mq.Conn
	queue       string
	reply       string
	led         *ledger
	cfgPath     string
	seq         atomic.Int64
	disruptions atomic.Int64 // kills, stops and outages: each may redeliver what was in flight

	mu      sync.Mutex
	servers []*server
	notes   []string
	errs    []string
}

func newRig(t *testing.T, name string, o rigOptions) *rig {
	t.Helper()
	h := setup(t)
	if o.attempts == 0 {
		o.attempts = 4
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &rig{t: t, h: h, sz: form(), name: name, ctx: ctx, dir: t.TempDir(), opts: o, start: time.Now(), led: newLedger()}
	r.broker = startBroker(t, h)
	r.proxy = newProxy(t, r.broker.addr, o.proxyTLS)
	prefix := fmt.Sprintf("chaos-%s.%s", h.run, name)
	r.queue, r.reply = prefix+".mlp", prefix+".reply"
	var err error
	r.ctl, err = mq.Dial(ctx, mq.Config{Address: r.broker.addr, AuthToken: r.broker.token,
		ClientID: fmt.Sprintf("chaos-%s-%s-ctl", h.run, name), MaxMessageBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel() // the subscription and drains first
		r.ctl.Close()
	})
	if err := r.led.subscribe(ctx, r.ctl, r.reply); err != nil {
		t.Fatal(err)
	}
	if err := r.led.drain(ctx, r.ctl, r.queue+".dlq", r.led.dlq); err != nil {
		t.Fatal(err)
	}
	if err := r.led.drain(ctx, r.ctl, r.queue+".unprocessable", r.led.unproc); err != nil {
		t.Fatal(err)
	}
	r.writeConfig()
	t.Cleanup(r.stopAll)
	return r
}

func (r *rig) writeConfig() {
	var b strings.Builder
	fmt.Fprintf(&b, "broker: {address: %q, client_id: %q", r.proxy.Addr(), fmt.Sprintf("chaos-%s-%s", r.h.run, r.name))
	if r.broker.token != "" {
		fmt.Fprintf(&b, ", auth_token: %q", r.broker.token)
	}
	if r.opts.brokerTLS != "" {
		fmt.Fprintf(&b, ", tls: %s", r.opts.brokerTLS)
	}
	fmt.Fprintf(&b, "}\nhttp: {listen: \"127.0.0.1:0\"%s}\ngrpc: {listen: \"\"}\ndata_dir: %q\n%s", r.opts.http, filepath.Join(r.dir, "data"), r.opts.top)
	fmt.Fprintf(&b, "models:\n  - name: mlp\n    path: %q\n    queue: %s\n    device: cpu\n%s",
		filepath.Join(r.h.models, "mlp.onnx"), r.queue, r.opts.model)
	r.cfgPath = filepath.Join(r.dir, "config.yaml")
	if err := os.WriteFile(r.cfgPath, []byte(b.String()), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// serve starts an inferq process and waits until it is ready.
func (r *rig) serve(o serveOptions) *server {
	r.t.Helper()
	s := r.startServe(o)
	s.waitReady(r.t, 60*time.Second)
	return s
}

// startServe starts an inferq process without waiting for readiness.
func (r *rig) startServe(o serveOptions) *server {
	r.t.Helper()
	r.mu.Lock()
	n := len(r.servers) + 1
	r.mu.Unlock()
	logPath := ""
	if *logsFlag != "" {
		if err := os.MkdirAll(*logsFlag, 0o755); err != nil {
			r.t.Fatal(err)
		}
		logPath = filepath.Join(*logsFlag, fmt.Sprintf("%s-%d.log", r.name, n))
	}
	s := startServer(r.t, r.h, r.cfgPath, logPath, o, r.opts.httpTLS, r.opts.token)
	r.mu.Lock()
	r.servers = append(r.servers, s)
	r.mu.Unlock()
	return s
}

// cur is the latest inferq process.
func (r *rig) cur() *server {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.servers) == 0 {
		return nil
	}
	return r.servers[len(r.servers)-1]
}

// running returns the inferq processes that have not exited: the latest
// one, or each replica of a fleet.
func (r *rig) running() []*server {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ss []*server
	for _, s := range r.servers {
		if !s.exited() {
			ss = append(ss, s)
		}
	}
	return ss
}

// exitedByItself reports whether an inferq process exited that the
// harness did not stop.
func (r *rig) exitedByItself() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.servers {
		if s.exited() && !s.stopping.Load() {
			return true
		}
	}
	return false
}

// stopAll kills what is still running (test cleanup).
func (r *rig) stopAll() {
	r.mu.Lock()
	ss := append([]*server(nil), r.servers...)
	r.mu.Unlock()
	for _, s := range ss {
		if !s.exited() {
			s.kill()
		}
	}
}

// fail records a broken promise for the scenario's verdict.
func (r *rig) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *rig) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// nextID returns a fresh task id of this scenario, unique to this run: a
// real KubeMQ keeps the per-task result channels of earlier runs (24 h),
// and an id seen before would find the last run's record there instead of
// an empty channel (the flood's compat tasks hid a stall that way).
func (r *rig) nextID(kind string) string {
	return fmt.Sprintf("%s-%s-%s-%d", kind, r.name, r.h.run, r.seq.Add(1))
}

// validTask builds one mlp task ([1,16] FP32) for the reply channel, in
// the binary form when binary.
func (r *rig) validTask(id string, binary bool, rnd *rand.Rand) (mq.OutMessage, *entry) {
	x := make([]float32, 16)
	for i := range x {
		x[i] = rnd.Float32()*2 - 1
	}
	opts := []task.Option{task.WithReplyTo(r.reply)}
	if binary {
		opts = append(opts, task.WithBinaryInputs())
	}
	body, tags, err := task.NewTask(id, "mlp", []tensor.Tensor{tensor.NewTensor("x", []int64{1, 16}, x)}, opts...)
	if err != nil {
		r.t.Fatal(err)
	}
	tags[tagKey] = id
	return mq.OutMessage{Channel: r.queue, Body: body, Tags: tags}, &entry{key: id, taskID: id, want: wantSuccess}
}

// sendValid sends n valid tasks, alternately JSON and binary.
func (r *rig) sendValid(n int) {
	r.t.Helper()
	rnd := rand.New(rand.NewPCG(uint64(r.seq.Load()), 1))
	msgs, es := make([]mq.OutMessage, 0, n), make([]*entry, 0, n)
	for i := range n {
		m, e := r.validTask(r.nextID("v"), i%2 == 1, rnd)
		msgs, es = append(msgs, m), append(es, e)
	}
	r.send(msgs, es)
}

// send registers es and sends msgs in batches. Messages the embedded
// broker refuses because their queue holds its byte bound
// (broker.Options.MaxQueueBytes) are sent again, as a producer would once
// the queue drains, for up to a minute.
func (r *rig) send(msgs []mq.OutMessage, es []*entry) {
	r.t.Helper()
	r.led.add(es...)
	for len(msgs) > 0 {
		n := min(len(msgs), 256)
		batch := msgs[:n]
		deadline := time.Now().Add(time.Minute)
		for {
			ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
			err := r.ctl.Sender().Send(ctx, batch...)
			cancel()
			if err == nil {
				break
			}
			full := queueFull(err, batch)
			if full == nil || time.Now().After(deadline) {
				r.t.Fatalf("send %d messages to %s: %v", len(batch), r.queue, err)
			}
			batch = full
			time.Sleep(100 * time.Millisecond)
		}
		msgs = msgs[n:]
	}
}

// queueFull returns the messages of batch that err says were refused
// because their queue was full, or nil when any failed otherwise.
func queueFull(err error, batch []mq.OutMessage) []mq.OutMessage {
	var be *mq.BatchError
	if !errors.As(err, &be) {
		if len(batch) == 1 && strings.Contains(err.Error(), " is full: ") {
			return batch // one message's error comes back as it is
		}
		return nil
	}
	if len(be.Errs) != len(batch) {
		return nil
	}
	var out []mq.OutMessage
	for i, e := range be.Errs {
		if e == nil {
			continue
		}
		if !strings.Contains(e.Error(), " is full: ") {
			return nil
		}
		out = append(out, batch[i])
	}
	return out
}

// waitSuccesses waits until n entries have a SUCCESS record.
func (r *rig) waitSuccesses(n int) {
	r.t.Helper()
	if !waitEvery(r.ctx, r.sz.settle, 50*time.Millisecond, func() bool { return r.led.successes() >= n || r.cur().exited() }) {
		r.t.Fatalf("only %d of the %d successes waited for within %s\n%s", r.led.successes(), n, r.sz.settle, r.cur().logs.tail(30))
	}
}

// expect is how strict a scenario's verdict is.
type expect struct {
	// exactlyOnce: a task stored twice (two terminal records) fails.
	exactlyOnce bool
	// bound is the most deliveries of one message to inferq; 0: the
	// model's attempts plus 2, plus 2 per disruption.
	bound int
	// rssLimit fails a peak RSS of inferq above it (bytes); 0: none.
	rssLimit int64
	// finalStop: the final SIGTERM's grace; 0: 30 s.
	finalStop time.Duration
	// extra checks the outcomes further; it returns broken promises.
	extra func(es []*entry, os []outcome) []string
}

// finish waits for every sent message's outcome, stops inferq with
// SIGTERM, and reports: one line, the summary row, and an error for each
// broken promise.
func (r *rig) finish(x expect) {
	r.t.Helper()
	bound := r.bound(x)
	r.settle(bound)
	sleepCtx(r.ctx, r.sz.linger) // a second record, a late dead letter
	r.led.lookupHeld(r.cur().lookup)
	es, os := r.led.outcomes()
	res := r.tally(es, os, bound, x)
	if x.extra != nil {
		res.errs = append(res.errs, x.extra(es, os)...)
	}
	grace := x.finalStop
	if grace == 0 {
		grace = 30 * time.Second
	}
	for _, s := range r.running() {
		if err := s.term(grace); err != nil {
			res.errs = append(res.errs, fmt.Sprintf("final SIGTERM: %v\n%s", err, s.logs.tail(20)))
		}
	}
	r.processChecks(&res, x)
	r.report(res)
}

// settle waits up to sz.settle for every entry's outcome, but those of
// messages delivered more than bound times (a proven loop), asking inferq
// about undelivered records whenever a second passed without progress.
func (r *rig) settle(bound int) {
	looping := func(key string) bool { return r.proxy.deliveries(key) > bound }
	asked, last := time.Now(), -1
	// Every 200 ms: pending walks every entry (110k in the full flood).
	waitEvery(r.ctx, r.sz.settle, 200*time.Millisecond, func() bool {
		if r.exitedByItself() {
			return true
		}
		n := r.led.pending(looping)
		if n == 0 {
			return true
		}
		if time.Since(asked) > time.Second {
			if n == last { // no progress in a second: ask about the rest
				r.led.lookupHeld(r.cur().lookup)
			}
			asked, last = time.Now(), n
		}
		return false
	})
}

// bound is the most deliveries of one message the scenario accepts.
func (r *rig) bound(x expect) int {
	if x.bound > 0 {
		return x.bound
	}
	return r.opts.attempts + 2 + 2*int(r.disruptions.Load())
}

// tally counts the outcomes.
func (r *rig) tally(es []*entry, os []outcome, bound int, x expect) result {
	res := result{name: r.name, sent: len(es)}
	var lost, failedValid, refusedOK, twice []string
	for i, e := range es {
		o := os[i]
		switch {
		case o.success > 0:
			res.ok++
		case o.failure > 0:
			res.failed++
		}
		if o.dlq > 0 {
			res.dlq++
		}
		if o.unproc > 0 {
			res.unproc++
		}
		if o.held != "" && o.records() == 0 {
			res.held++
		}
		if !o.settled(e.want) && !(e.want == wantSuccess && o.failure > 0) {
			res.lost++
			lost = append(lost, describe(e, o))
		}
		if o.records() > 1 {
			res.twice++
			twice = append(twice, describe(e, o))
		}
		if o.runs > 1 {
			res.ran2++
		}
		if e.want == wantSuccess && o.failure > 0 {
			failedValid = append(failedValid, describe(e, o))
		}
		if e.want == wantRefused && o.success > 0 {
			refusedOK = append(refusedOK, describe(e, o))
		}
		if d := r.proxy.deliveries(e.key); d > res.maxDeliv {
			res.maxDeliv, res.maxDelivKey = d, e.key
		}
	}
	res.maxRC = r.proxy.maxReceiveCount()
	res.dur = time.Since(r.start)
	fail := func(list []string, format string, args ...any) {
		if len(list) > 0 {
			sort.Strings(list)
			res.errs = append(res.errs, fmt.Sprintf(format, args...)+": "+strings.Join(list[:min(5, len(list))], "; "))
		}
	}
	fail(lost, "%d lost (no record, not dead-lettered, not unprocessable, not held)", len(lost))
	if len(lost) > 0 && r.cur() != nil {
		res.errs = append(res.errs, "the last inferq's log, to see why:\n"+r.cur().logs.tail(40))
	}
	fail(failedValid, "%d valid tasks got a FAILURE record", len(failedValid))
	fail(refusedOK, "%d tasks inferq must refuse got SUCCESS", len(refusedOK))
	if x.exactlyOnce {
		fail(twice, "%d tasks stored twice where exactly once is due", len(twice))
	}
	if res.maxDeliv > bound {
		res.errs = append(res.errs, fmt.Sprintf("redelivery loop: %.80q delivered %d times (bound %d; max ReceiveCount %d)",
			res.maxDelivKey, res.maxDeliv, bound, res.maxRC))
	}
	if n, sample := r.led.invalidJSON(); n > 0 {
		res.errs = append(res.errs, fmt.Sprintf("%d records encoding/json cannot read, e.g. %s", n, sample))
	}
	return res
}

// describe names an entry and its outcome for an error message.
func describe(e *entry, o outcome) string {
	s := fmt.Sprintf("%.60q: %d SUCCESS %d FAILURE, dlq %d, unprocessable %d", e.key, o.success, o.failure, o.dlq, o.unproc)
	if o.lastErr != "" {
		s += fmt.Sprintf(", error %.120q", o.lastErr)
	}
	if o.reason != "" {
		s += fmt.Sprintf(", reason %.120q", o.reason)
	}
	return s
}

// processChecks: inferq and the broker never exit by themselves, never
// panic, keep log lines short and stay under the RSS limit.
func (r *rig) processChecks(res *result, x expect) {
	r.mu.Lock()
	ss := append([]*server(nil), r.servers...)
	res.notes = append(res.notes, r.notes...)
	res.errs = append(res.errs, r.errs...)
	r.mu.Unlock()
	for i, s := range ss {
		if s.exited() && !s.stopping.Load() {
			res.errs = append(res.errs, fmt.Sprintf("inferq process %d exited by itself: %v\n%s", i+1, s.err, s.logs.tail(30)))
		}
		longest, panics, _ := s.logs.stats()
		res.logKiB = max(res.logKiB, longest>>10)
		if panics > 0 {
			res.errs = append(res.errs, fmt.Sprintf("inferq process %d panicked\n%s", i+1, s.logs.tail(30)))
		}
		if longest > maxLogLine {
			res.errs = append(res.errs, fmt.Sprintf("inferq process %d wrote a %d-byte log line (limit %d)", i+1, longest, maxLogLine))
		}
		res.rss = max(res.rss, s.hwm.Load())
	}
	if x.rssLimit > 0 && res.rss > x.rssLimit {
		res.errs = append(res.errs, fmt.Sprintf("peak RSS %d MB over %d MB", res.rss>>20, x.rssLimit>>20))
	}
	if err := r.broker.alive(); err != nil {
		res.errs = append(res.errs, err.Error())
	}
}

// abort reports the scenario failed with why, and stops it.
func (r *rig) abort(format string, args ...any) {
	r.t.Helper()
	r.report(result{name: r.name, dur: time.Since(r.start), errs: []string{fmt.Sprintf(format, args...)}})
	r.t.FailNow()
}

// report prints the scenario's line, adds its summary row and fails the
// test on each error.
func (r *rig) report(res result) {
	r.t.Helper()
	res.form = r.sz.name
	r.t.Log(res.line())
	for _, n := range res.notes {
		r.t.Log("  note: " + n)
	}
	for _, e := range res.errs {
		r.t.Error(e)
	}
	summary.add(res)
}

// probeReadiness polls /readyz every 200 ms until stop is closed and
// returns when it first failed (zero: never) and how many probes did not
// answer at all.
func (r *rig) probeReadiness(s *server, stop <-chan struct{}) (firstDown func() time.Duration, unanswered func() int) {
	var mu sync.Mutex
	var down time.Duration
	var silent int
	start := time.Now()
	go func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			code, err := s.get("/readyz", "")
			mu.Lock()
			if err != nil {
				silent++
			}
			if (err != nil || code != 200) && down == 0 {
				down = time.Since(start)
			}
			mu.Unlock()
		}
	}()
	return func() time.Duration {
			mu.Lock()
			defer mu.Unlock()
			return down
		}, func() int {
			mu.Lock()
			defer mu.Unlock()
			return silent
		}
}
