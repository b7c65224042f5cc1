package infer

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/task"
)

// A summary counts a task whose result is stored by reference ok when it
// was read and failed when not, with why as the first error, and says how
// many results came by reference.
func TestSummaryCountsResultsByReference(t *testing.T) {
	recs := map[string]*task.Record{
		"a": {TaskID: "a", Status: task.StatusSuccess, Result: []byte(`{}`)},
		"b": {TaskID: "b", Status: task.StatusSuccess, Result: []byte(`{}`)}, // read from its replica
		"c": {TaskID: "c", Status: task.StatusSuccess, ResultRef: "/v1/tasks/c"},
	}
	refs := map[string]error{"b": nil, "c": errors.New("the result of task c is stored by reference at /v1/tasks/c and could not be read")}
	lat := []time.Duration{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond}
	for _, asJSON := range []bool{false, true} {
		var out strings.Builder
		r := &run{Config: Config{Model: "m", Queue: "q", JSON: asJSON, Stdout: &out}}
		err := r.printSummary([]string{"a", "b", "c"}, recs, refs, lat, time.Second)
		if err == nil || !strings.Contains(err.Error(), "1 of 3 tasks failed; first: the result of task c is stored by reference") {
			t.Errorf("json %v: error %v", asJSON, err)
		}
		if !asJSON {
			if !strings.Contains(out.String(), "2 ok, 1 failed") || !strings.Contains(out.String(), "2 results stored by reference, 1 read") {
				t.Errorf("summary:\n%s", out.String())
			}
			continue
		}
		var sum map[string]any
		if err := json.Unmarshal([]byte(out.String()), &sum); err != nil || sum["ok"] != 2.0 || sum["failed"] != 1.0 || sum["by_reference"] != 2.0 {
			t.Errorf("JSON summary %v: %s", err, out.String())
		}
	}
	// A task without such results says nothing of references.
	var out strings.Builder
	r := &run{Config: Config{Model: "m", Queue: "q", Stdout: &out}}
	if err := r.printSummary([]string{"a"}, recs, nil, lat[:1], time.Second); err != nil || strings.Contains(out.String(), "reference") {
		t.Errorf("no references: %v\n%s", err, out.String())
	}
}

// One task whose result could not be read by reference fails with why,
// and prints nothing.
func TestRecordByReferenceUnread(t *testing.T) {
	var out strings.Builder
	r := &run{Config: Config{Stdout: &out}}
	rec := &task.Record{TaskID: "c", Status: task.StatusSuccess, ResultRef: "/v1/tasks/c"}
	why := errors.New("could not be read: 404")
	if err := r.printRecord(rec, why, time.Millisecond); !errors.Is(err, why) || out.Len() != 0 {
		t.Errorf("error %v, output %q", err, out.String())
	}
	// Without a read (Record.Response alone), the error is the reference's.
	err := r.printRecord(rec, nil, time.Millisecond)
	if !errors.Is(err, task.ErrResultByReference) {
		t.Errorf("error %v, want task.ErrResultByReference", err)
	}
}
