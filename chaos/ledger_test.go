package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/inferq/inferq/mq"
)

// want is what a sent message must come to.
type want int

const (
	// wantSuccess: a valid task; it must get a SUCCESS record on the reply
	// channel and no FAILURE record.
	wantSuccess want = iota
	// wantRefused: a task inferq must refuse: a FAILURE record, the dead
	// letter queue or the unprocessable queue, never SUCCESS.
	wantRefused
	// wantAny: a hostile message: any outcome (a record, the dead letter
	// or unprocessable queue, a record kept apart that /v1/tasks answers)
	// as long as it has one.
	wantAny
)

// entry is one message sent.
type entry struct {
	key    string // tagKey, or the task_id tag for tasks the Go client sent
	taskID string // the record's task_id ("" when the body has none)
	alt    string // another task_id its record may carry (a duplicated key)
	want   want
	// missing: a task the producer did not report (adoptRecords); it has
	// no id to wait for and counts as lost.
	missing bool
}

// recState is what the reply channel brought for one task id.
type recState struct {
	seqs      map[uint64]string // events store sequence -> status: distinct records
	completed map[string]bool   // completed_at of its SUCCESS records: distinct runs
	lastErr   string
}

// ledger accounts for every message a scenario sends: records from the
// reply channel (each decoded with encoding/json, so a record a standard
// client cannot read is counted), copies drained from the dead letter and
// unprocessable queues, and, through the proxy, deliveries to inferq. Its
// methods are safe for concurrent use.
type ledger struct {
	mu      sync.Mutex
	entries []*entry
	recs    map[string]*recState // by task id
	dlq     map[string]int       // by key
	unproc  map[string]int
	reasons map[string]string // key -> the dead letter or unprocessable error tag
	held    map[string]string // key -> the status /v1/tasks answered
	// badJSON counts records encoding/json cannot read; badSample is one.
	badJSON   int
	badSample string
	nextSeq   uint64 // for events without a sequence
}

func newLedger() *ledger {
	return &ledger{recs: map[string]*recState{}, dlq: map[string]int{}, unproc: map[string]int{}, reasons: map[string]string{},
		held: map[string]string{}}
}

// add registers sent messages.
func (l *ledger) add(es ...*entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, es...)
}

// subscribe reads the records of reply until ctx ends.
func (l *ledger) subscribe(ctx context.Context, conn *mq.Conn, reply string) error {
	events, err := conn.SubscribeEventsStore(ctx, reply, "", 1)
	if err != nil {
		return fmt.Errorf("subscribe to %s: %w", reply, err)
	}
	go func() {
		for e := range events {
			l.record(e)
		}
	}()
	return nil
}

// record takes one event of the reply channel.
func (l *ledger) record(e mq.Event) {
	var rec struct {
		TaskID      string `json:"task_id"`
		Status      string `json:"status"`
		CompletedAt string `json:"completed_at"`
		Error       string `json:"error"`
	}
	err := json.Unmarshal(e.Body, &rec)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.badJSON++
		if l.badSample == "" {
			l.badSample = fmt.Sprintf("%v: %.200q", err, e.Body)
		}
		return
	}
	if !terminal(rec.Status) {
		return
	}
	rs := l.recs[rec.TaskID]
	if rs == nil {
		rs = &recState{seqs: map[uint64]string{}, completed: map[string]bool{}}
		l.recs[rec.TaskID] = rs
	}
	seq := e.Sequence
	if seq == 0 {
		l.nextSeq++
		seq = 1<<63 + l.nextSeq
	}
	rs.seqs[seq] = rec.Status
	if rec.Status == "SUCCESS" {
		rs.completed[rec.CompletedAt] = true
	} else {
		rs.lastErr = rec.Error
	}
}

func terminal(status string) bool {
	return status == "SUCCESS" || status == "FAILURE" || status == "CANCELLED"
}

// recordCount is the number of task ids with a terminal record.
func (l *ledger) recordCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.recs)
}

// adoptRecords makes every task id with a record a valid task of the
// scenario, for tasks another process sent (their ids unknown before),
// and adds entries named prefix-<k> with no record for the rest of n.
func (l *ledger) adoptRecords(n int, prefix string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	known := map[string]bool{}
	for _, e := range l.entries {
		known[e.taskID] = true
	}
	for id := range l.recs {
		if !known[id] {
			l.entries = append(l.entries, &entry{key: id, taskID: id, want: wantSuccess})
			n--
		}
	}
	for k := range max(n, 0) {
		id := fmt.Sprintf("%s-%d", prefix, k)
		l.entries = append(l.entries, &entry{key: id, taskID: id, want: wantSuccess, missing: true})
	}
}

// drain consumes channel (a dead letter or unprocessable queue) until ctx
// ends, counting each copy under its key.
func (l *ledger) drain(ctx context.Context, conn *mq.Conn, channel string, counts map[string]int) error {
	p, err := conn.NewPoller(mq.PollerConfig{Channel: channel, MaxItems: 64, DrainTimeout: time.Second,
		Deliver: func(ctx context.Context, batch []*mq.Message) error {
			l.mu.Lock()
			for _, m := range batch {
				key := m.Tags[tagKey]
				if key == "" {
					key = m.Tags["task_id"]
				}
				counts[key]++
				if _, ok := l.reasons[key]; !ok {
					l.reasons[key] = m.Tags["error"]
				}
			}
			l.mu.Unlock()
			for _, m := range batch {
				_ = m.Ack()
			}
			return nil
		}})
	if err != nil {
		return fmt.Errorf("drain %s: %w", channel, err)
	}
	go func() { _ = p.Run(ctx) }()
	return nil
}

// outcome is one entry's fate.
type outcome struct {
	success, failure int // distinct terminal records by status
	runs             int // distinct SUCCESS runs (completed_at)
	dlq, unproc      int
	held             string // a status /v1/tasks answers for a record not delivered
	lastErr, reason  string
}

func (o outcome) records() int { return o.success + o.failure }

// settled reports whether e has the outcome it must reach.
func (o outcome) settled(w want) bool {
	if w == wantSuccess {
		// A FAILURE record alone may still be followed by the SUCCESS
		// of a redelivery (issue 11 item 5): wait for the dead letter.
		return o.success > 0 || o.failure > 0 && o.dlq+o.unproc > 0
	}
	return o.records() > 0 || o.dlq > 0 || o.unproc > 0 || o.held != ""
}

// outcomeLocked returns e's outcome; l.mu is held.
func (l *ledger) outcomeLocked(e *entry) outcome {
	o := outcome{dlq: l.dlq[e.key], unproc: l.unproc[e.key], reason: l.reasons[e.key], held: l.held[e.key]}
	rs := l.recs[e.taskID]
	if rs == nil && e.taskID != "" {
		// inferq writes an invalid UTF-8 id with replacement characters.
		rs = l.recs[strings.ToValidUTF8(e.taskID, "\uFFFD")]
	}
	if rs == nil && e.alt != "" {
		rs = l.recs[e.alt]
	}
	if rs != nil && e.taskID != "" {
		for _, st := range rs.seqs {
			if st == "SUCCESS" {
				o.success++
			} else {
				o.failure++
			}
		}
		o.runs, o.lastErr = len(rs.completed), rs.lastErr
	}
	return o
}

// pending counts the entries without the outcome they must reach, but
// those skip (may be nil) excludes.
func (l *ledger) pending(skip func(key string) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.entries {
		if !e.missing && (skip == nil || !skip(e.key)) && !l.outcomeLocked(e).settled(e.want) {
			n++
		}
	}
	return n
}

// outcomeOf returns the outcome of the entry with key.
func (l *ledger) outcomeOf(key string) outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.entries {
		if e.key == key {
			return l.outcomeLocked(e)
		}
	}
	return outcome{}
}

// successes counts the entries with a SUCCESS record.
func (l *ledger) successes() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.entries {
		if l.outcomeLocked(e).success > 0 {
			n++
		}
	}
	return n
}

// lookupHeld asks lookup (inferq's /v1/tasks) for the records of the
// unsettled entries that are not valid tasks: records inferq keeps but
// could not deliver.
func (l *ledger) lookupHeld(lookup func(id string) string) {
	l.mu.Lock()
	var ask []*entry
	for _, e := range l.entries {
		if e.want != wantSuccess && e.taskID != "" && !l.outcomeLocked(e).settled(e.want) {
			ask = append(ask, e)
		}
	}
	l.mu.Unlock()
	for _, e := range ask {
		if st := lookup(e.taskID); st != "" {
			l.mu.Lock()
			l.held[e.key] = st
			l.mu.Unlock()
		}
	}
}

// outcomes returns every entry with its outcome.
func (l *ledger) outcomes() ([]*entry, []outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	es := append([]*entry(nil), l.entries...)
	os := make([]outcome, len(es))
	for i, e := range es {
		os[i] = l.outcomeLocked(e)
	}
	return es, os
}

func (l *ledger) invalidJSON() (int, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.badJSON, l.badSample
}
