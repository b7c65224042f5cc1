package task

import (
	"strings"
	"testing"
	"time"
)

// The reference record a too-large result is replaced by: the record
// without its result and binary outputs, with result_ref naming where the
// whole record is read (issue 25, item 1).
func TestRecordReference(t *testing.T) {
	r := &Record{TaskID: "t1", Status: StatusSuccess, Result: []byte(`{"outputs":[]}`), Binary: []byte{1, 2, 3},
		CreatedAt: time.Unix(1, 0), CompletedAt: time.Unix(2, 0), Attempts: 2, Worker: "host"}
	ref := r.Reference(ResultRef("http://inferq-1.h.ns.svc:8080/", r.TaskID))
	if ref.Result != nil || ref.Binary != nil || ref.ResultRef != "http://inferq-1.h.ns.svc:8080/v1/tasks/t1" {
		t.Fatalf("reference %+v", ref)
	}
	if ref.TaskID != r.TaskID || ref.Status != r.Status || ref.Attempts != 2 || ref.Worker != "host" || !ref.CompletedAt.Equal(r.CompletedAt) {
		t.Errorf("reference lost the record's fields: %+v", ref)
	}
	if r.Result == nil || r.Binary == nil || r.ResultRef != "" {
		t.Errorf("Reference changed the record: %+v", r)
	}
	body, tags := ref.Encode()
	if !strings.Contains(string(body), `"result":null`) || !strings.Contains(string(body), `"result_ref":"http://inferq-1.h.ns.svc:8080/v1/tasks/t1"`) || tags[TagContentType] != ContentTypeJSON {
		t.Errorf("encoded reference %s %v", body, tags)
	}
	if got := ResultRef("", "t1"); got != "/v1/tasks/t1" {
		t.Errorf("relative ResultRef %q", got)
	}
}
