package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/admit"
	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/results"
	"github.com/inferq/inferq/task"
)

// decide, without a broker: what each job comes to.
func TestDecide(t *testing.T) {
	boom := errors.New("boom")
	backoff := models.Retries{MaxRetries: 3, BackoffInitial: models.Duration(time.Second), BackoffMax: models.Duration(4 * time.Second)}
	for _, tc := range []struct {
		name   string
		f      facts
		action action
		status task.Status
		label  string
		err    string // in the error
		delay  [2]time.Duration
	}{
		{"success", facts{attempt: 1, limit: 4}, actAck, task.StatusSuccess, OutcomeSuccess, "", [2]time.Duration{}},
		{"undecodable", facts{verdict: admit.Undecodable, why: boom}, actUnprocessable, "", OutcomeUnprocessable, "boom", [2]time.Duration{}},
		{"unknown model", facts{verdict: admit.UnknownModel, why: boom}, actUnprocessable, task.StatusFailure, OutcomeUnknownModel, "boom", [2]time.Duration{}},
		{"bad input", facts{verdict: admit.BadInput, why: boom}, actDeadLetter, task.StatusFailure, OutcomeBadInput, "boom", [2]time.Duration{}},
		{"too large", facts{verdict: admit.TooLarge, why: boom}, actDeadLetter, task.StatusFailure, OutcomeBadInput, "boom", [2]time.Duration{}},
		{"expired", facts{verdict: admit.Expired, why: boom}, actAck, task.StatusFailure, OutcomeExpired, "boom", [2]time.Duration{}},
		{"cancelled", facts{verdict: admit.Cancelled, why: boom}, actAck, task.StatusCancelled, OutcomeCancelled, "boom", [2]time.Duration{}},
		{"crash budget spent", facts{spent: true, attempt: 5, limit: 4, crashes: 4}, actDeadLetter, task.StatusFailure, OutcomeFailure,
			"worker lost during inference: the process ended during 4 attempt(s) of this task; attempts exhausted (4)", [2]time.Duration{}},
		{"attempts spent, FAILURE stored", facts{spent: true, attempt: 2, limit: 1}, actDeadLetter, task.StatusFailure, OutcomeFailure,
			"attempts exhausted (1)", [2]time.Duration{}},
		{"run refused the input", facts{result: fmt.Errorf("x: %w", batch.ErrInvalidInput), attempt: 1, limit: 4}, actDeadLetter, task.StatusFailure, OutcomeBadInput, "x: ", [2]time.Duration{}},
		{"deadline before the run", facts{result: context.DeadlineExceeded, attempt: 1, limit: 4}, actAck, task.StatusFailure, OutcomeExpired,
			"deadline exceeded before inference started", [2]time.Duration{}},
		{"shutdown before the run", facts{result: context.Canceled, attempt: 1, limit: 4}, actGiveBack, "", "", "canceled", [2]time.Duration{}},
		{"batcher closed", facts{result: fmt.Errorf("enqueue: %w", batch.ErrClosed), attempt: 1, limit: 4}, actGiveBack, "", "", "closed", [2]time.Duration{}},
		{"never ran, whatever the error, last attempt", facts{result: boom, neverRan: true, attempt: 1, limit: 1}, actGiveBack, "", "", "boom", [2]time.Duration{}},
		{"never ran, its deadline passed", facts{result: context.DeadlineExceeded, neverRan: true, attempt: 1, limit: 1}, actAck, task.StatusFailure, OutcomeExpired,
			"deadline exceeded before inference started", [2]time.Duration{}},
		{"failure, attempts left", facts{result: boom, attempt: 2, limit: 4, retries: backoff}, actRetry, "", OutcomeRetry, "boom",
			[2]time.Duration{time.Second, 2 * time.Second}},
		{"failure, no backoff: NAck", facts{result: boom, attempt: 1, limit: 4}, actRetry, "", OutcomeRetry, "boom", [2]time.Duration{}},
		{"failure, last attempt", facts{result: boom, attempt: 4, limit: 4, retries: backoff}, actDeadLetter, task.StatusFailure, OutcomeFailure,
			"attempt 4 of 4: boom", [2]time.Duration{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := decide(tc.f)
			if o.action != tc.action || o.status != tc.status || o.label != tc.label {
				t.Fatalf("settlement %+v, want action %d status %q label %q", o, tc.action, tc.status, tc.label)
			}
			if (tc.err == "") != (o.err == nil) || (o.err != nil && !strings.Contains(o.err.Error(), tc.err)) {
				t.Errorf("error %v, want %q", o.err, tc.err)
			}
			if o.delay < tc.delay[0] || o.delay > tc.delay[1] {
				t.Errorf("delay %v, want within %v", o.delay, tc.delay)
			}
			want := tc.f.attempt
			if tc.f.spent {
				want = tc.f.limit
			}
			if o.attempts != want {
				t.Errorf("attempts %d, want %d", o.attempts, want)
			}
		})
	}
}

// retryDelay doubles from backoff_initial up to backoff_max, jittered over
// the upper half.
func TestRetryDelay(t *testing.T) {
	tests := []struct {
		initial, max time.Duration
		attempt      int
		lo, hi       time.Duration
	}{
		{time.Second, 30 * time.Second, 1, 500 * time.Millisecond, time.Second},
		{time.Second, 30 * time.Second, 2, time.Second, 2 * time.Second},
		{time.Second, 30 * time.Second, 3, 2 * time.Second, 4 * time.Second},
		{time.Second, 5 * time.Second, 10, 2500 * time.Millisecond, 5 * time.Second},
		{time.Second, 5 * time.Second, 1000, 2500 * time.Millisecond, 5 * time.Second},
		{0, 0, 3, 0, 0},
	}
	for _, tt := range tests {
		r := models.Retries{BackoffInitial: models.Duration(tt.initial), BackoffMax: models.Duration(tt.max)}
		seen := map[time.Duration]bool{}
		for range 200 {
			d := retryDelay(r, tt.attempt)
			if d < tt.lo || d > tt.hi {
				t.Fatalf("retryDelay(%v, %v, %d) = %v, want within [%v, %v]", tt.initial, tt.max, tt.attempt, d, tt.lo, tt.hi)
			}
			seen[d] = true
		}
		if tt.hi > 0 && len(seen) < 2 {
			t.Errorf("retryDelay(%v, %v, %d) has no jitter", tt.initial, tt.max, tt.attempt)
		}
	}
}

// afterStore, without a broker: what a failed store of a settlement's
// record changes.
func TestAfterStore(t *testing.T) {
	boom := errors.New("broker away")
	invalid := fmt.Errorf("too big: %w", results.ErrInvalidEntry)
	ack := settlement{action: actAck, status: task.StatusSuccess, label: OutcomeSuccess, attempts: 2}
	dead := settlement{action: actDeadLetter, status: task.StatusFailure, err: boom, label: OutcomeFailure, attempts: 4}
	unproc := settlement{action: actUnprocessable, status: task.StatusFailure, err: boom, label: OutcomeUnknownModel, attempts: 1}
	for _, tc := range []struct {
		name   string
		o      settlement
		err    error
		action action
		label  string
		errIn  string
	}{
		{"stored: unchanged", ack, nil, actAck, OutcomeSuccess, ""},
		{"stored dead letter: unchanged", dead, nil, actDeadLetter, OutcomeFailure, "broker away"},
		{"store away: nack, no outcome", ack, boom, actNAck, "", "broker away"},
		{"store away on a dead letter: nack", dead, boom, actNAck, "", "broker away"},
		{"record refused for good: dead letter", ack, invalid, actDeadLetter, OutcomeFailure, "storing its SUCCESS record: too big"},
		{"unprocessable: forwarded all the same", unproc, boom, actUnprocessable, OutcomeUnknownModel, "broker away"},
		{"unprocessable, refused record: forwarded", unproc, invalid, actUnprocessable, OutcomeUnknownModel, "broker away"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := afterStore(tc.o, tc.o.status, tc.err)
			if got.action != tc.action || got.label != tc.label {
				t.Errorf("afterStore = action %d label %q, want %d %q", got.action, got.label, tc.action, tc.label)
			}
			if got.attempts != tc.o.attempts {
				t.Errorf("attempts %d, want %d kept", got.attempts, tc.o.attempts)
			}
			if tc.errIn == "" && got.err != nil || tc.errIn != "" && (got.err == nil || !strings.Contains(got.err.Error(), tc.errIn)) {
				t.Errorf("err %v, want one with %q", got.err, tc.errIn)
			}
			if got.action == actNAck && got.status != "" {
				t.Errorf("a nack stores nothing more, got status %q", got.status)
			}
		})
	}
}
