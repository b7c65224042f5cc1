package chaos

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/testcert"
)

// TestChaos runs every scenario: `-run 'TestChaos/<name>'` picks one.
// Each prints one line (sent, succeeded, failed, unprocessable, dead
// letters, held, lost, stored twice, ran twice, max ReceiveCount, max
// deliveries of one message, peak RSS, longest log line, time) and fails
// on any loss, loop, unexpected exit or broken promise of issue 11.
func TestChaos(t *testing.T) {
	for _, sc := range []struct {
		name string
		run  func(t *testing.T, name string)
	}{
		{"kill9", kill9},
		{"sigterm", sigterm},
		{"broker-freeze", brokerFreeze},
		{"broker-restart", brokerRestart},
		{"store-down", storeDown},
		{"flood", flood},
		{"item1-oversize", item1Oversize},
		{"item2-ids", item2IDs},
		{"item3-spool-full", item3SpoolFull},
		{"item4-journal", item4Journal},
		{"item7-slow-http", item7SlowHTTP},
		{"item8-json", item8JSON},
		{"item9-tls", item9TLS},
		{"fleet", fleet},
		{"fleet-sharded", fleet},
	} {
		t.Run(sc.name, func(t *testing.T) { sc.run(t, sc.name) })
	}
}

// batching keeps batches small, so that a stop always finds some in
// flight.
const batching = "    batching: {max_batch_size: 16, max_queue_delay: 2ms}\n"

// kill9: inferq is killed with SIGKILL mid-load, stops times, and started
// again each time, as a supervisor would: nothing is lost (a task in flight
// may be stored twice: at-least-once).
func kill9(t *testing.T, name string) {
	r := newRig(t, name, rigOptions{model: batching})
	n := r.sz.tasks
	r.sendValid(n)
	r.serve(serveOptions{})
	for k := 1; k <= r.sz.stops; k++ {
		r.waitSuccesses(n * k / (r.sz.stops + 1))
		r.cur().kill()
		r.note("kill -9 %d at %d of %d successes", k, r.led.successes(), n)
		r.disruptions.Add(1)
		r.serve(serveOptions{})
	}
	r.finish(expect{})
}

// sigterm (issue 11 item 5): SIGTERM mid-load, 2 x stops times, with a
// long and a too short grace in turn, and max_retries: 0 so that a task
// cancelled at the drain and recorded as a FAILURE shows. Each stop exits 0; every task SUCCESS exactly once, none
// with a FAILURE record.
func sigterm(t *testing.T, name string) {
	r := newRig(t, name, rigOptions{model: batching + "    retries: {max_retries: 0}\n", attempts: 1})
	n := r.sz.tasks
	r.sendValid(n)
	r.serve(serveOptions{})
	// Stops alternate a long grace (what was taken finishes: a task handed
	// to intake while the stop interrupted its delivery runs twice) and
	// one too short for it (what did not finish is cancelled: given back,
	// or wrongly a FAILURE).
	stops := 2 * r.sz.stops
	for k := 1; k <= stops; k++ {
		r.waitSuccesses(n * k / (stops + 1))
		at := r.led.successes()
		if err := r.cur().term(60 * time.Second); err != nil {
			r.fail("SIGTERM %d: %v, want exit 0\n%s", k, err, r.cur().logs.tail(20))
		}
		r.note("SIGTERM %d at %d of %d successes (%d after the exit)", k, at, n, r.led.successes())
		r.disruptions.Add(1)
		grace := 10 * time.Second
		if k%2 == 1 {
			grace = 20 * time.Millisecond
		}
		r.serve(serveOptions{grace: grace})
	}
	r.finish(expect{exactlyOnce: true})
}

// brokerFreeze: the broker stops answering mid-load (every call held at
// the proxy: connections stay open, nothing answers, like SIGSTOP) for the
// outage; /readyz must turn false within readyWithin (issue 11 item 5),
// and nothing is lost or recomputed. In the short form the freeze lasts
// until /readyz turns false (at least the outage, at most readyWithin).
func brokerFreeze(t *testing.T, name string) {
	r := newRig(t, name, rigOptions{model: batching})
	n := r.sz.tasks
	r.sendValid(n)
	s := r.serve(serveOptions{})
	r.waitSuccesses(n / 5)
	stop := make(chan struct{})
	down, _ := r.probeReadiness(s, stop)
	r.proxy.hold(allMethods)
	r.disruptions.Add(1)
	start := time.Now()
	if *fullFlag {
		sleepCtx(r.ctx, r.sz.outage)
	} else {
		waitFor(r.ctx, r.sz.readyWithin, func() bool { return time.Since(start) >= r.sz.outage && down() > 0 })
	}
	r.proxy.release()
	close(stop)
	switch d := down(); {
	case d == 0:
		r.fail("/readyz answered 200 throughout a %s broker freeze", time.Since(start).Round(time.Second))
	case d > r.sz.readyWithin:
		r.fail("/readyz turned false %s into the broker freeze, later than %s", d.Round(time.Millisecond), r.sz.readyWithin)
	default:
		r.note("/readyz turned false %s into the freeze (%s)", d.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	}
	r.finish(expect{})
}

// brokerRestart (issue 11 item 6): `inferq infer -n tasks` (the
// binary's producer, the Go client) and inferq serve both go through the
// proxy, which drops every connection and refuses new ones for the outage
// mid-load: a broker restart that keeps its store (with KUBEMQ_ADDRESS and
// CHAOS_KUBEMQ_RESTART, the real broker is restarted instead). The
// producer's run must finish (exit 0, every result back), nothing lost.
func brokerRestart(t *testing.T, name string) {
	r := newRig(t, name, rigOptions{model: batching})
	n := r.sz.tasks
	r.serve(serveOptions{})
	identity := fmt.Sprintf("chaos-%s-%s", r.h.run, name)
	if err := r.led.subscribe(r.ctx, r.ctl, "inferq.reply."+identity); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.sz.settle+time.Minute)
	defer cancel()
	infer := exec.CommandContext(ctx, r.h.bin, "infer", "mlp", "--random", "-n", fmt.Sprint(n), "--broker", r.proxy.Addr(),
		"--queue", r.queue, "--identity", identity, "--timeout", r.sz.settle.String(), "--json")
	infer.Env = childEnv(nil)
	infer.SysProcAttr = orphanKill()
	if r.broker.token != "" {
		infer.Env = append(infer.Env, "INFERQ_AUTH_TOKEN="+r.broker.token)
	}
	var out strings.Builder
	infer.Stdout, infer.Stderr = &out, &out
	if err := infer.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- infer.Wait() }()
	// Mid-send: once the producer's first batch went out.
	waitFor(r.ctx, r.sz.settle, func() bool { return r.proxy.sentTo(r.queue) >= min(n/4, 256) || len(exited) > 0 })
	r.disruptions.Add(1)
	if r.broker.real && r.broker.restart != "" {
		if err := r.broker.restartReal(r.ctx); err != nil {
			r.fail("%v", err)
		}
		r.note("restarted the real broker (CHAOS_KUBEMQ_RESTART)")
	} else if err := r.proxy.restart(r.ctx, r.sz.outage); err != nil {
		t.Fatal(err)
	}
	r.note("the broker went away after %d of %d tasks were sent", r.proxy.sentTo(r.queue), n)
	if err := <-exited; err != nil {
		r.fail("inferq infer -n %d did not finish: %v: %.500s", n, err, out.String())
	}
	// The producer's ids are its own: every record it got is a task sent,
	// and what it did not get counts as lost.
	r.led.adoptRecords(n, "infer-missing")
	r.finish(expect{})
}

// storeDown: the result store (inferq's events store sends) stops
// answering for the outage mid-load while tasks still flow: records go to
// the spool and are replayed; nothing lost.
func storeDown(t *testing.T, name string) {
	r := newRig(t, name, rigOptions{model: batching})
	n := r.sz.tasks
	r.sendValid(n)
	r.serve(serveOptions{})
	r.waitSuccesses(n / 5)
	r.proxy.hold(resultStore)
	r.disruptions.Add(1)
	sleepCtx(r.ctx, r.sz.outage)
	r.proxy.release()
	r.finish(expect{})
}

// flood: hostile messages of every kind in hostileKinds interleaved with
// valid tasks: every valid task SUCCESS exactly once, every hostile
// message has an outcome, no loop, no panic, no restart.
func flood(t *testing.T, name string) {
	r := newRig(t, name, rigOptions{})
	r.serve(serveOptions{})
	g := newHostileGen(r)
	rnd := rand.New(rand.NewPCG(1, 2))
	h, v := r.sz.floodHostile, r.sz.floodValid
	var msgs []mq.OutMessage
	var es []*entry
	flush := func() {
		r.send(msgs, es)
		msgs, es = msgs[:0], es[:0]
	}
	for i, sentValid := 0, 0; i < h || sentValid < v; i++ {
		if i < h {
			m, e := g.next(i)
			msgs, es = append(msgs, m), append(es, e)
		}
		if sentValid < v && (i >= h || i*v/h >= sentValid) {
			m, e := r.validTask(r.nextID("v"), sentValid%2 == 1, rnd)
			msgs, es = append(msgs, m), append(es, e)
			sentValid++
		}
		if len(msgs) >= 256 {
			flush()
		}
	}
	flush()
	r.finish(expect{exactlyOnce: true})
}

// item1Oversize (issue 11 item 1): a well-formed 17 MiB task of the wrong
// shape on the default config: it must reach the dead letter queue (or
// the unprocessable queue) once, with one FAILURE record at most and a
// bounded number of deliveries, watched for sz.watch or until it is there.
func item1Oversize(t *testing.T, name string) {
	r := newRig(t, name, rigOptions{})
	r.serve(serveOptions{})
	r.sendValid(50)
	id := r.nextID("big")
	const elems = 17 << 20 / 2 // "0," per element: 17 MiB
	data := "[" + strings.Repeat("0,", elems-1) + "0]"
	body := taskBody(jsonStr(id), xInput(fmt.Sprintf("[1,%d]", elems), data), jsonStr(r.reply))
	r.send([]mq.OutMessage{{Channel: r.queue, Body: body, Tags: map[string]string{tagKey: id, "task_id": id}}},
		[]*entry{{key: id, taskID: id, want: wantRefused}})
	r.sendValid(50)
	waitFor(r.ctx, r.sz.settle, func() bool { return r.proxy.deliveries(id) > 0 })
	watch := time.Now()
	waitFor(r.ctx, r.sz.watch, func() bool {
		o := r.led.outcomeOf(id)
		return r.proxy.deliveries(id) > r.bound(expect{}) || o.dlq+o.unproc > 0
	})
	r.note("the 17 MiB task was delivered %d times in %s", r.proxy.deliveries(id), time.Since(watch).Round(time.Second))
	r.finish(expect{exactlyOnce: true, extra: func(es []*entry, os []outcome) []string {
		for i, e := range es {
			if e.key == id && os[i].dlq+os[i].unproc == 0 {
				return []string{fmt.Sprintf("the 17 MiB task never reached the dead letter or unprocessable queue (%d FAILURE records)", os[i].failure)}
			}
		}
		return nil
	}})
}

// item2IDs (issue 11 item 2): valid bodies under ids and reply_to values
// that are not channel names (newline, space, `*`, `>`, trailing dot, a
// 4.5 MiB id), with reply_to and on the compat path: each gets an outcome
// (the unprocessable queue, or a record kept apart that /v1/tasks
// answers), nothing loops and no log line carries the 4.5 MiB id. Then
// the result store refuses writes for the outage while valid tasks run:
// their spooled records must be replayed past the refused ones; and
// valid tasks sent last all succeed: the broker stays healthy.
func item2IDs(t *testing.T, name string) {
	r := newRig(t, name, rigOptions{})
	r.serve(serveOptions{})
	r.sendValid(50)
	in := xInput("[1,16]", row16("0.5"))
	var msgs []mq.OutMessage
	var es []*entry
	add := func(id, replyJSON string) {
		key := r.nextID("h")
		msgs = append(msgs, mq.OutMessage{Channel: r.queue, Body: taskBody(jsonStr(id), in, replyJSON), Tags: map[string]string{tagKey: key, "task_id": id}})
		es = append(es, &entry{key: key, taskID: id, want: wantAny})
	}
	for _, sfx := range []string{"\nx", " x", "*", ">", "x."} {
		add(r.nextID("id")+sfx, jsonStr(r.reply)) // record to the reply channel
		add(r.nextID("compat")+sfx, "")           // record to rayserve-result-<id>
	}
	add(r.nextID("huge")+strings.Repeat("I", 4608<<10), jsonStr(r.reply))
	for _, rt := range []string{"a b", "x\ny", "*", ">", "x."} {
		add(r.nextID("rt"), jsonStr(rt))
	}
	r.send(msgs, es)
	r.settle(r.bound(expect{}))
	// Valid records spooled behind the refused ones must be replayed.
	r.proxy.refuse(resultStore)
	r.disruptions.Add(1)
	r.sendValid(100)
	sleepCtx(r.ctx, r.sz.outage)
	r.proxy.release()
	r.sendValid(50) // the broker and inferq still serve
	r.finish(expect{})
}

// spoolYAML is the config that makes item 3's spool small. Its field names
// come from the item 3 change; CHAOS_SPOOL_YAML overrides them.
func spoolYAML() string {
	if y := os.Getenv("CHAOS_SPOOL_YAML"); y != "" {
		return y + "\n"
	}
	return "results: {spool_max_disk_bytes: 8192}\n"
}

// item3SpoolFull (issue 11 item 3): a small spool, and the result store
// refusing every write mid-load: the spool fills, and inferq must stop
// taking tasks (/readyz false) instead of evicting a record; once the
// store is back every task SUCCESS, nothing lost.
func item3SpoolFull(t *testing.T, name string) {
	r := newRig(t, name, rigOptions{model: batching, top: spoolYAML()})
	if out, err := exec.Command(r.h.bin, "serve", "--config", r.cfgPath, "--print-config").CombinedOutput(); err != nil {
		r.abort("this inferq refuses the spool limit %q (item 3's config is not in this binary, or is named otherwise: set CHAOS_SPOOL_YAML): %v: %.300s",
			strings.TrimSpace(spoolYAML()), err, out)
	}
	n := r.sz.tasks
	r.sendValid(n)
	s := r.serve(serveOptions{})
	r.waitSuccesses(n / 10)
	stop := make(chan struct{})
	down, _ := r.probeReadiness(s, stop)
	r.proxy.refuse(resultStore)
	r.disruptions.Add(1)
	start := time.Now()
	waitFor(r.ctx, r.sz.readyWithin+r.sz.outage, func() bool { return time.Since(start) >= r.sz.outage && down() > 0 })
	r.proxy.release()
	close(stop)
	if down() == 0 {
		r.fail("/readyz stayed 200 for %s while the result store refused every write and the spool was limited (%q)",
			time.Since(start).Round(time.Second), strings.TrimSpace(spoolYAML()))
	}
	r.finish(expect{})
}

// item4Journal (issue 11 item 4): tasks whose message ids forge journal
// lines (`x\nC <victim> 50`), then kill -9 and a restart; the victims, sent
// afterwards under those ids, must run. A second process on the same
// data_dir must refuse to start with a clear error.
func item4Journal(t *testing.T, name string) {
	r := newRig(t, name, rigOptions{})
	s := r.serve(serveOptions{})
	rnd := rand.New(rand.NewPCG(4, 4))
	const victims = 5
	victim := func(k int) string { return fmt.Sprintf("victim-%s-%d", r.h.run, k) }
	var msgs []mq.OutMessage
	var es []*entry
	for k := range victims {
		for _, mid := range []string{fmt.Sprintf("x%d\nC %s 50", k, victim(k)), fmt.Sprintf("a b %d %s", k, victim(k))} {
			m, e := r.validTask(r.nextID("j"), k%2 == 0, rnd)
			m.ID = mid
			msgs, es = append(msgs, m), append(es, e)
		}
	}
	for _, e := range es {
		e.want = wantAny
	}
	r.send(msgs, es)
	waitFor(r.ctx, r.sz.settle, func() bool { return r.led.pending(nil) == 0 })
	r.secondProcessRefused()
	s.kill()
	r.disruptions.Add(1)
	r.serve(serveOptions{})
	msgs, es = msgs[:0], es[:0]
	for k := range victims {
		m, e := r.validTask(victim(k), false, rnd)
		m.ID = victim(k)
		msgs, es = append(msgs, m), append(es, e)
	}
	r.send(msgs, es)
	r.finish(expect{})
}

// secondProcessRefused starts a second inferq on the running one's
// data_dir: it must exit non-zero, naming the lock.
func (r *rig) secondProcessRefused() {
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.h.bin, "serve", "--config", r.cfgPath, "--log-format", "json")
	cmd.Env = childEnv([]string{"INFERQ_ORT_LIB=" + r.h.lib})
	cmd.SysProcAttr = orphanKill()
	out, err := cmd.CombinedOutput()
	switch {
	case err == nil:
		r.fail("a second inferq on the same data_dir exited 0; want a refusal")
	case ctx.Err() != nil:
		r.fail("a second inferq on the same data_dir kept running for 30 s; want a refusal")
	case !strings.Contains(strings.ToLower(string(out)), "lock"):
		r.fail("a second inferq on the same data_dir exited (%v) without naming the lock: %.300s", err, out)
	}
}

// item7SlowHTTP (issue 11 item 7): slowConns clients declare a 60 MB body
// and trickle 1 byte/s for slowFor while tasks flow: inferq's peak RSS
// stays under 500 MB and /readyz answers 200 every time.
func item7SlowHTTP(t *testing.T, name string) {
	r := newRig(t, name, rigOptions{})
	s := r.serve(serveOptions{})
	r.sendValid(r.sz.tasks / 2)
	stop := make(chan struct{})
	down, silent := r.probeReadiness(s, stop)
	ctx, cancel := context.WithTimeout(r.ctx, r.sz.slowFor)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	closedEarly := 0
	for range r.sz.slowConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !trickle(ctx, s.httpAddr) {
				mu.Lock()
				closedEarly++
				mu.Unlock()
			}
		}()
	}
	r.sendValid(r.sz.tasks / 2)
	wg.Wait()
	close(stop)
	r.note("%d of %d slow connections were closed by inferq before the end", closedEarly, r.sz.slowConns)
	if d, n := down(), silent(); d > 0 || n > 0 {
		r.fail("/readyz failed under slow clients: first failure %s in, %d probes unanswered", d.Round(time.Millisecond), n)
	}
	r.finish(expect{rssLimit: 500 << 20})
}

// trickle is one slow client: it declares Content-Length 60000000 and
// sends a byte a second until ctx ends. It reports whether the connection
// stayed open that long.
func trickle(ctx context.Context, addr string) bool {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 60000000\r\n\r\n", addr)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return true
		case <-tick.C:
			_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := conn.Write([]byte("[")); err != nil {
				return false
			}
		}
	}
}

// item8JSON (issue 11 item 8): FP32 inputs that do not fit (1e999, 1e39)
// are refused; huge finite and bare non-finite inputs succeed; every record
// (non-finite outputs included) is read by encoding/json.
func item8JSON(t *testing.T, name string) {
	r := newRig(t, name, rigOptions{})
	r.serve(serveOptions{})
	r.sendValid(50)
	var msgs []mq.OutMessage
	var es []*entry
	add := func(data string, w want) {
		id := r.nextID("nf")
		msgs = append(msgs, mq.OutMessage{Channel: r.queue, Body: taskBody(jsonStr(id), xInput("[1,16]", data), jsonStr(r.reply)),
			Tags: map[string]string{tagKey: id, "task_id": id}})
		es = append(es, &entry{key: id, taskID: id, want: w})
	}
	for range 5 {
		add(row16("1e999"), wantRefused)
		add(row16("-1e999"), wantRefused)
		add(row16("1e39"), wantRefused)
		add("["+strings.Repeat("3e38,", 15)+"3e38]", wantSuccess)
		add("["+strings.Repeat("-3e38,3e38,", 7)+"-3e38,3e38]", wantSuccess)
		add(row16("NaN"), wantSuccess)
		add(row16("Infinity"), wantSuccess)
	}
	r.send(msgs, es)
	r.finish(expect{})
}

// item9TLS (issue 11 items 7 and 9): inferq reaches the broker over
// mutual TLS (the proxy serves TLS and requires a client certificate),
// serves HTTPS with a bearer token (no token or a wrong one: 401; the
// health checks need none), and a failing alert webhook never prints the
// secret in its path to the log.
func item9TLS(t *testing.T, name string) {
	ca := testcert.NewCA(t, "chaos-ca")
	front, httpLeaf, cli := ca.Server(t, "broker"), ca.Server(t, "http"), ca.Client(t, "inferq")
	token := "chaos-" + setup(t).run
	r := newRig(t, name, rigOptions{
		proxyTLS: &tls.Config{Certificates: []tls.Certificate{front.TLS}, ClientAuth: tls.RequireAndVerifyClientCert,
			ClientCAs: ca.Pool, MinVersion: tls.VersionTLS12},
		brokerTLS: fmt.Sprintf("{ca: %q, cert: %q, key: %q}", ca.File, cli.CertFile, cli.KeyFile),
		http:      fmt.Sprintf(", auth_token: %q, tls_cert: %q, tls_key: %q", token, httpLeaf.CertFile, httpLeaf.KeyFile),
		httpTLS:   &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12},
		token:     token,
	})
	secret := "chaos-webhook-secret-" + r.h.run
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hook := fmt.Sprintf("http://%s/hooks/%s", lis.Addr(), secret)
	lis.Close() // nothing listens: every alert fails

	// The consumer's "dlq webhook failed" warning.
	const failed = "webhook failed"
	s := r.serve(serveOptions{args: []string{"--alert-webhook", hook}, watch: []string{secret, failed}})
	for _, c := range []struct {
		path, tok string
		want      int
	}{
		{"/v1/models", "", 401}, {"/v1/models", "wrong-" + token, 401}, {"/v1/models", token, 200},
		{"/metrics", "wrong", 401}, {"/readyz", "", 200}, {"/healthz", "", 200},
	} {
		if code, err := s.get(c.path, c.tok); err != nil || code != c.want {
			r.fail("GET %s with token %q: %d %v, want %d", c.path, c.tok, code, err, c.want)
		}
	}
	r.sendValid(100)
	id := r.nextID("wrongshape")
	r.send([]mq.OutMessage{{Channel: r.queue, Body: taskBody(jsonStr(id), xInput("[1,4]", "[[1,2,3,4]]"), jsonStr(r.reply)),
		Tags: map[string]string{tagKey: id, "task_id": id}}}, []*entry{{key: id, taskID: id, want: wantRefused}})
	r.finish(expect{extra: func([]*entry, []outcome) []string {
		if !waitFor(r.ctx, 30*time.Second, func() bool { return s.logs.count(failed) > 0 }) {
			return []string{fmt.Sprintf("no %q log line: the alert webhook was not tried", failed)}
		}
		if n := s.logs.count(secret); n > 0 {
			return []string{fmt.Sprintf("the alert webhook's secret path appeared in %d log lines", n)}
		}
		return nil
	}})
}

// sleepCtx sleeps d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}
