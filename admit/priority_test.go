package admit

import (
	"strings"
	"testing"
	"time"
)

// TestAdmitPriority: a task's kwargs.priority, a query's and an HTTP
// request's "priority" parameter pick the priority level, checked against
// the model's batching.priority_levels, with errors naming the field.
func TestAdmitPriority(t *testing.T) {
	mt := admitTable(t)
	m := mt.byName["m"]
	m.Config.Batching.PriorityLevels, m.Config.Batching.DefaultPriorityLevel = 3, 2
	now := time.Now()
	for _, tc := range []struct {
		name     string
		model    string
		priority string // the JSON value; "" for none
		level    int    // when admitted
		want     []string
	}{
		{name: "none takes the default", model: "m", level: 2},
		{name: "0 takes the default", model: "m", priority: "0", level: 2},
		{name: "highest", model: "m", priority: "1", level: 1},
		{name: "lowest", model: "m", priority: "3", level: 3},
		{name: "beyond the levels", model: "m", priority: "4", want: []string{`model "m"`, "priority 4: want 1 (highest) to 3 (batching.priority_levels)"}},
		{name: "negative", model: "m", priority: "-1", want: []string{"priority -1: want 1 (highest) to 3"}},
		{name: "fraction", model: "m", priority: "1.5", want: []string{"priority", "want an integer"}},
		{name: "string", model: "m", priority: `"1"`, want: []string{"priority", "want an integer"}},
		{name: "bool", model: "m", priority: "true", want: []string{"priority", "want an integer"}},
		{name: "huge", model: "m", priority: "99999999999", want: []string{"priority", "want an integer"}},
		{name: "no levels, none", model: "small", level: 1},
		{name: "no levels, 0", model: "small", priority: "0", level: 1},
		{name: "no levels, 1", model: "small", priority: "1", want: []string{`model "small"`, "priority 1: the model has no priority levels (batching.priority_levels 0)"}},
	} {
		for _, from := range []Source{FromQueue, FromQuery, FromHTTP} {
			t.Run(tc.name+"/"+from.noun(), func(t *testing.T) {
				in := Input{From: from, Received: now}
				var body string
				if from == FromHTTP {
					in.Model = tc.model
					params := ""
					if tc.priority != "" {
						params = `"parameters":{"priority":` + tc.priority + `},`
					}
					body = `{"id":"r1",` + params + `"inputs":[` + x4 + `]}`
				} else {
					kw := ""
					if tc.priority != "" {
						kw = `"priority":` + tc.priority + `,`
					}
					body = `{"task_id":"t1","task_name":"` + tc.model + `","kwargs":{` + kw + `"inputs":[` + x4 + `]}}`
				}
				in.Body = []byte(body)
				a := mt.Admit(in)
				if tc.want == nil {
					if a.Verdict != Run || a.Level != tc.level {
						t.Fatalf("verdict %d (%v) level %d, want it run at level %d", a.Verdict, a.Err, a.Level, tc.level)
					}
					return
				}
				if a.Verdict != BadInput {
					t.Fatalf("verdict %d (%v), want bad input", a.Verdict, a.Err)
				}
				field := "kwargs.priority"
				if from == FromHTTP {
					field = "parameters.priority"
				}
				for _, w := range append(tc.want, field) {
					if !strings.Contains(a.Err.Error(), w) {
						t.Errorf("error %q does not say %q", a.Err, w)
					}
				}
			})
		}
	}
}
