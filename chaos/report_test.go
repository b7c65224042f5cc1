package chaos

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// result is one scenario's accounting.
type result struct {
	name, form string
	// sent messages; ok: with a SUCCESS record; failed: FAILURE or
	// CANCELLED records only; unproc, dlq: copies drained from the
	// unprocessable and dead letter queues; held: a record /v1/tasks
	// answers but the reply channel never got; lost: none of these;
	// twice: more than one terminal record; ran2: more than one SUCCESS
	// run (distinct completed_at).
	sent, ok, failed, unproc, dlq, held, lost, twice, ran2 int
	// maxRC is the largest ReceiveCount delivered; maxDeliv the most
	// deliveries of one message (by key), maxDelivKey that message.
	maxRC, maxDeliv int
	maxDelivKey     string
	rss             int64 // peak RSS of inferq, bytes
	logKiB          int   // longest log line
	dur             time.Duration
	errs, notes     []string
}

func (r result) verdict() string {
	if len(r.errs) > 0 {
		return "FAIL"
	}
	return "ok"
}

// line is the one line a scenario prints.
func (r result) line() string {
	return fmt.Sprintf("chaos %s (%s): sent %d, succeeded %d, failed %d, unprocessable %d, dlq %d, held %d, lost %d, stored twice %d, ran twice %d, max ReceiveCount %d, max deliveries %d, peak RSS %d MB, longest log line %d KiB, %s: %s",
		r.name, r.form, r.sent, r.ok, r.failed, r.unproc, r.dlq, r.held, r.lost, r.twice, r.ran2, r.maxRC, r.maxDeliv,
		r.rss>>20, r.logKiB, r.dur.Round(100*time.Millisecond), r.verdict())
}

// table collects the rows printed at the end of the run.
type table struct {
	mu   sync.Mutex
	rows []result
}

func (t *table) add(r result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rows = append(t.rows, r)
}

func (t *table) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.rows)
}

func (t *table) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "\nchaos summary (%s form)\n", t.rows[0].form)
	fmt.Fprintf(&b, "%-18s %7s %7s %6s %6s %6s %5s %5s %6s %5s %6s %6s %6s %7s %8s  %s\n",
		"scenario", "sent", "ok", "failed", "unproc", "dlq", "held", "lost", "twice", "ran2", "maxRC", "deliv", "rssMB", "logKiB", "time", "verdict")
	for _, r := range t.rows {
		fmt.Fprintf(&b, "%-18s %7d %7d %6d %6d %6d %5d %5d %6d %5d %6d %6d %6d %7d %8s  %s\n",
			r.name, r.sent, r.ok, r.failed, r.unproc, r.dlq, r.held, r.lost, r.twice, r.ran2, r.maxRC, r.maxDeliv,
			r.rss>>20, r.logKiB, r.dur.Round(100*time.Millisecond), r.verdict())
	}
	return b.String()
}
