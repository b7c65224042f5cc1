package models

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/task"
)

// A result over result.max_result_bytes reaches the broker as a reference
// record (task.Record.Reference); a limit below that record's size made
// every large result fail into the dead letter queue while its producer
// heard nothing. Such a limit is refused at load, naming the field and the
// smallest value that works (issue 25, item 1).
func TestMaxResultBytesBelowReference(t *testing.T) {
	if MinResultBytes <= 270 {
		t.Fatalf("MinResultBytes %d: a reference record with a UUID task id is already about 270 bytes", MinResultBytes)
	}
	// The largest reference record: the longest task id, host name and
	// advertise_url, the most attempts.
	id := strings.Repeat("i", task.MaxNameBytes)
	rec := &task.Record{TaskID: id, Status: task.StatusSuccess, Result: []byte(`{"outputs":[]}`),
		CreatedAt: time.Now(), CompletedAt: time.Now(), Attempts: 1 << 62, Worker: strings.Repeat("h", maxHostNameBytes)}
	base := "https://" + strings.Repeat("a", maxAdvertiseURLBytes-len("https://"))
	body, _ := rec.Reference(task.ResultRef(base, id)).Encode()
	if len(body) > MinResultBytes {
		t.Fatalf("a reference record of %d bytes is over MinResultBytes %d", len(body), MinResultBytes)
	}

	cfg := func(n int) string {
		return "models: [{name: a, path: a.onnx, result: {max_result_bytes: " + strconv.Itoa(n) + "}}]"
	}
	for _, n := range []int{100, MinResultBytes - 1} {
		_, err := Parse([]byte(cfg(n)))
		if err == nil || !strings.Contains(err.Error(), `model "a": result.max_result_bytes:`) || !strings.Contains(err.Error(), "at least "+strconv.Itoa(MinResultBytes)) {
			t.Errorf("max_result_bytes %d: %v, want an error naming the field and %d", n, err, MinResultBytes)
		}
	}
	if _, err := Parse([]byte(cfg(MinResultBytes))); err != nil {
		t.Errorf("max_result_bytes %d (MinResultBytes): %v", MinResultBytes, err)
	}
	// The same through a repository's config.yaml.
	if _, _, err := ParseModel([]byte("result: {max_result_bytes: 100}"), "m", "m/1/model.onnx"); err == nil || !strings.Contains(err.Error(), strconv.Itoa(MinResultBytes)) {
		t.Errorf("config.yaml with max_result_bytes 100: %v", err)
	}
	// advertise_url is bounded so that its references stay within it.
	long := "http://" + strings.Repeat("a", maxAdvertiseURLBytes)
	if _, err := Parse([]byte("http: {advertise_url: '" + long + "'}\n" + minimal)); err == nil || !strings.Contains(err.Error(), "http.advertise_url") || !strings.Contains(err.Error(), strconv.Itoa(maxAdvertiseURLBytes)) {
		t.Errorf("advertise_url of %d bytes: %v", len(long), err)
	}
}
