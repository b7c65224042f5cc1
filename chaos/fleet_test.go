package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/shard"
	"github.com/inferq/inferq/task"
)

// fleetSize is the fleet scenario's scale (issue 12 item 5).
type fleetSize struct {
	tasks int
	// kills is the number of SIGKILLs of the first replica; every is the
	// load sent between two of them (tasks/(kills+1), paced over every).
	kills int
	every time.Duration
	// crashHold is --crash-hold; 0: its default (10 s). The short form's
	// 3 s keeps the wait of the tasks caught by the last kill short, and
	// is still above a replica's restart here (about 1 s to ready).
	crashHold time.Duration
}

func fleetForm() fleetSize {
	if *fullFlag {
		return fleetSize{tasks: 20000, kills: 12, every: 3 * time.Second}
	}
	return fleetSize{tasks: 1500, kills: 3, every: 2 * time.Second, crashHold: 3 * time.Second}
}

// fleetReplicas is the number of inferq processes on the one queue.
const fleetReplicas = 3

// fleetShards is fleet-sharded's --queue-shards.
const fleetShards = 3

// fleetRunDelay is added to every batch's inference (the faultinject
// build's INFERQ_FAULT_RUN_DELAY), like a model on a GPU: mlp alone runs
// a batch in microseconds, so a SIGKILL almost never finds a task between
// the journal's start and done marks (0 of 12 kills did in a full run) and
// the fleet's crash budget would go untested. With it the replicas are busy
// running batches most of the time at the paced load.
const fleetRunDelay = 10 * time.Millisecond

// fleetRetries is the model's max_retries for k kills: high enough that no
// task can reach the dead letter queue by the harness's doing. A task's
// attempt number is 1 plus its redeliveries plus its crashes (consumer
// attempt): each SIGKILL adds at most one redelivery and one crash to a
// task it caught in flight, and the SIGTERM at most one redelivery (a task
// given back at the drain), so a task's attempt never passes 2k+2, within
// max_retries+1 = 2k+3. Any dead letter is then a broken promise, not a
// task "lost during inference" by design.
func fleetRetries(kills int) int { return 2*kills + 2 }

// fleet (issue 12 item 5): three replicas on one queue, each with its own
// data_dir, client id and HTTP port, share the load and the crash budget
// (`<queue>.crashes`). The load is sent paced, in kills+1 slices of
// `every`; after each slice but the last, replica 1 is killed with SIGKILL
// and restarted on its data_dir (a pod restarted in place: its journal
// reports the crash to the fleet). Mid-load replica 2 gets SIGTERM and is
// not restarted: a scale-down from three to two, where what it took must
// finish or be given back and its spool must be flushed before it exits
// (0), since no restart will ever read its data_dir again. Replica 3 runs
// throughout. Every task must end SUCCESS once, or SUCCESS more than once
// (a duplicate: at-least-once delivery, counted and reported), never
// lost; a dead letter fails (fleetRetries makes one impossible). The
// replicas are the -tags faultinject build with fleetRunDelay per batch, so
// that kills land mid-inference; the full form fails when none did.
//
// fleet-sharded is the same with the queue spread over fleetShards shards
// (serve --queue-shards) and each task sent to the shard its id hashes
// to: the kills and the scale-down move shards between the replicas.
func fleet(t *testing.T, name string) {
	f := fleetForm()
	shards := 1
	if name == "fleet-sharded" {
		shards = fleetShards
	}
	retries := fleetRetries(f.kills)
	r := newRig(t, name, rigOptions{model: batching + fmt.Sprintf("    retries: {max_retries: %d}\n", retries), attempts: retries + 1})
	bin, err := r.h.faultBinary()
	if err != nil {
		t.Fatal(err)
	}
	replica := func(slot int) serveOptions {
		args := []string{"--data-dir", filepath.Join(r.dir, fmt.Sprintf("data-%d", slot)),
			"--client-id", fmt.Sprintf("chaos-%s-%s-r%d", r.h.run, name, slot)}
		if f.crashHold > 0 {
			args = append(args, "--crash-hold", f.crashHold.String())
		}
		if shards > 1 {
			args = append(args, "--queue-shards", fmt.Sprint(shards))
		}
		return serveOptions{bin: bin, env: []string{"INFERQ_FAULT_RUN_DELAY=" + fleetRunDelay.String()}, args: args,
			watch: []string{crashPublished}}
	}
	var reps [fleetReplicas]*server
	for i := range reps {
		reps[i] = r.startServe(replica(i))
	}
	for _, s := range reps {
		s.waitReady(t, 60*time.Second)
	}
	msgs, es := r.fleetTasks(f.tasks)
	for i := range msgs {
		msgs[i].Channel = shard.Channel(msgs[i].Channel, shard.Pick(msgs[i].Tags[task.TagTaskID], shards))
	}
	r.led.add(es...)
	slice := (len(msgs) + f.kills) / (f.kills + 1)
	termed := make(chan error, 1)
	restarts := 0
	for k := 0; k <= f.kills; k++ {
		part := msgs[min(k*slice, len(msgs)):min((k+1)*slice, len(msgs))]
		if k == f.kills/2 {
			// Mid-slice, while the load flows: a scale-down.
			go func() {
				sleepCtx(r.ctx, f.every/2)
				at := r.led.successes()
				err := reps[1].term(60 * time.Second)
				r.note("SIGTERM of replica 2 at %d of %d successes (%d after its exit); not restarted", at, f.tasks, r.led.successes())
				termed <- err
			}()
		}
		r.sendPaced(part, f.every)
		if k == f.kills {
			break
		}
		at := r.led.successes()
		reps[0].kill()
		r.disruptions.Add(1)
		reps[0] = r.serve(replica(0))
		restarts++
		r.note("kill -9 %d of replica 1 at %d of %d successes; restarted", k+1, at, f.tasks)
	}
	if err := <-termed; err != nil {
		r.fail("SIGTERM of replica 2: %v, want exit 0\n%s", err, reps[1].logs.tail(20))
	}
	r.disruptions.Add(1)
	r.finish(expect{extra: func(es []*entry, os []outcome) []string {
		return r.fleetAccount(es, os, f, restarts, retries)
	}})
}

// crashPublished is the log line of a restarted replica whose journal
// held tasks that were running at the kill (crash Fleet.publish):
// the kills that reached the fleet's crash budget.
const crashPublished = "crash report published"

// crashReportsPublished counts crashPublished lines over every process.
func (r *rig) crashReportsPublished() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.servers {
		n += s.logs.count(crashPublished)
	}
	return n
}

// fleetTasks builds n valid tasks, alternately JSON and binary.
func (r *rig) fleetTasks(n int) ([]mq.OutMessage, []*entry) {
	rnd := rand.New(rand.NewPCG(12, 5))
	msgs, es := make([]mq.OutMessage, 0, n), make([]*entry, 0, n)
	for i := range n {
		m, e := r.validTask(r.nextID("v"), i%2 == 1, rnd)
		msgs, es = append(msgs, m), append(es, e)
	}
	return msgs, es
}

// sendPaced sends msgs (registered already) in batches of 32 spread
// evenly over d; a failed send fails the scenario.
func (r *rig) sendPaced(msgs []mq.OutMessage, d time.Duration) {
	const batch = 32
	batches := max(1, (len(msgs)+batch-1)/batch)
	start := time.Now()
	for i := 0; len(msgs) > 0; i++ {
		sleepCtx(r.ctx, time.Until(start.Add(d*time.Duration(i)/time.Duration(batches))))
		n := min(len(msgs), batch)
		ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
		err := r.ctl.Sender().Send(ctx, msgs[:n]...)
		cancel()
		if err != nil {
			r.t.Fatalf("send %d messages to %s: %v", n, r.queue, err)
		}
		msgs = msgs[n:]
	}
}

// fleetAccount sorts every task into exactly one of SUCCESS once, SUCCESS
// more than once (a duplicate, reported), dead-lettered (reported with its
// reason; a failure here) and lost (a failure, which tally reports), and
// notes the counts.
func (r *rig) fleetAccount(es []*entry, os []outcome, f fleetSize, restarts, retries int) []string {
	var once, dup, extra, ran2, dlq, lost, redelivered int
	reasons := map[string]int{}
	for i, e := range es {
		o := os[i]
		switch {
		case o.success == 1:
			once++
		case o.success > 1:
			dup++
			extra += o.success - 1
		case o.dlq > 0:
			dlq++
			reasons[o.reason]++
		default:
			lost++
		}
		if o.runs > 1 {
			ran2++
		}
		if r.proxy.deliveries(e.key) > 1 {
			redelivered++
		}
	}
	r.note("fleet: %d replicas, %d tasks, %d kill -9 (%d restarts), 1 SIGTERM (not restarted), max_retries %d, --crash-hold %s, inference +%s per batch",
		fleetReplicas, len(es), f.kills, restarts, retries, holdName(f.crashHold), fleetRunDelay)
	r.note("%d of the %d restarts published a crash report (a kill that caught tasks mid-inference)", r.crashReportsPublished(), restarts)
	r.note("accounting: %d SUCCESS once, %d SUCCESS more than once (duplicates: %d extra records, %d ran more than once), %d dead-lettered, %d lost; %d tasks delivered more than once",
		once, dup, extra, ran2, dlq, lost, redelivered)
	var errs []string
	if *fullFlag && r.crashReportsPublished() == 0 {
		// The short form's few kills may all miss a running batch.
		errs = append(errs, fmt.Sprintf("none of the %d kills caught a task mid-inference (no crash report published): the fleet's crash budget went untested (is %s a faultinject build?)",
			f.kills, r.h.faultBin))
	}
	if dlq == 0 {
		return errs
	}
	var rs []string
	for why, n := range reasons {
		rs = append(rs, fmt.Sprintf("%d x %.160q", n, why))
	}
	sort.Strings(rs)
	return append(errs, fmt.Sprintf("%d tasks dead-lettered where max_retries %d allows none (2 x %d kills + 2): %s",
		dlq, retries, f.kills, strings.Join(rs, "; ")))
}

func holdName(d time.Duration) string {
	if d == 0 {
		return "default"
	}
	return d.String()
}
