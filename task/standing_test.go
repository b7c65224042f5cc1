package task

import (
	"testing"
	"time"
)

func TestStand(t *testing.T) {
	at := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	rec := func(s Status, worker string) []byte {
		return (&Record{TaskID: "t", Status: s, CreatedAt: at, Worker: worker}).AppendJSON(nil)
	}
	ours := map[string]string{TagWriter: WriterInferq}
	for _, tc := range []struct {
		name string
		tags map[string]string
		body []byte
		want Standing
	}{
		{"the producer's PENDING", nil, rec(StatusPending, ""), Superseded},
		{"the adapter's PENDING as Python writes it", nil,
			[]byte(`{"task_id": "t", "status": "PENDING", "result": null, "created_at": "2026-06-01T12:00:00.000000+00:00", "completed_at": null}`), Superseded},
		{"a STARTED", nil, rec(StatusStarted, ""), Superseded},
		{"the producer's CANCELLED", nil, rec(StatusCancelled, ""), Final},
		{"the adapter's CANCELLED as Python writes it", nil,
			[]byte(`{"task_id": "t", "status": "CANCELLED", "result": null, "created_at": "2026-06-01T12:00:00+00:00", "completed_at": "2026-06-01T12:00:01+00:00"}`), Final},
		{"another writer's SUCCESS", nil, rec(StatusSuccess, ""), Final},
		{"another writer's FAILURE", map[string]string{TagStatus: "FAILURE"}, rec(StatusFailure, ""), Final},
		{"inferq's SUCCESS, tagged", ours, rec(StatusSuccess, "w1"), Superseded},
		{"inferq's CANCELLED, tagged", ours, rec(StatusCancelled, "w1"), Superseded},
		{"tagged, the body not read", ours, []byte("not json"), Superseded},
		{"an untagged record of an older inferq", nil, rec(StatusSuccess, "w1"), Superseded},
		{"a tag of another value", map[string]string{TagWriter: "python"}, rec(StatusCancelled, ""), Final},
		{"no record", nil, []byte("hello"), Foreign},
		{"empty", nil, nil, Foreign},
		{"no status", nil, []byte(`{"task_id":"t"}`), Foreign},
		{"an unknown status", nil, []byte(`{"task_id":"t","status":"REVOKED"}`), Foreign},
	} {
		if got := Stand(tc.tags, tc.body); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// FuzzStand: whatever a channel holds, Stand answers one of its three
// standings, never Final for a record that is not terminal or that an
// inferq worker wrote, and Superseded for a terminal record only when
// inferq wrote it.
func FuzzStand(f *testing.F) {
	f.Add([]byte(`{"task_id":"t","status":"CANCELLED","result":null}`), "")
	f.Add([]byte(`{"task_id":"t","status":"PENDING","result":null}`), "")
	f.Add([]byte(`{"task_id":"t","status":"SUCCESS","result":null,"worker":"w"}`), "")
	f.Add([]byte(`{"task_id":"t","status":"SUCCESS","result":{"outputs":[]}}`), WriterInferq)
	f.Add([]byte(`{"task_id":"t","status":"FAILURE"}`+"\x00\x01"), "x")
	f.Fuzz(func(t *testing.T, body []byte, writer string) {
		tags := map[string]string{}
		if writer != "" {
			tags[TagWriter] = writer
		}
		s := Stand(tags, body)
		if writer == WriterInferq {
			if s != Superseded {
				t.Fatalf("a record tagged inferq's: %v", s)
			}
			return
		}
		r, err := ParseRecord(body)
		switch {
		case err != nil || !r.Status.Valid():
			if s != Foreign {
				t.Fatalf("no record (%v): %v", err, s)
			}
		case r.Status.Terminal() && r.Worker == "":
			if s != Final {
				t.Fatalf("another writer's %s: %v", r.Status, s)
			}
		default:
			if s != Superseded {
				t.Fatalf("%s by %q: %v", r.Status, r.Worker, s)
			}
		}
	})
}
