package consumer_test

import (
	"testing"

	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/task"
)

// With AdvertiseURL set, an oversized result's substitute record points at
// this replica: result_ref is <AdvertiseURL>/v1/tasks/<id> (a trailing '/'
// of the setting is not doubled), which any client behind the Service can
// follow to the replica whose spool holds the whole record.
func TestOversizeResultRefAdvertised(t *testing.T) {
	for _, tt := range []struct{ name, advertise, want string }{
		{"unset: relative", "", "/v1/tasks/big"},
		{"pod dns name", "http://inferq-1.inferq-headless.inferq.svc:8080", "http://inferq-1.inferq-headless.inferq.svc:8080/v1/tasks/big"},
		{"path prefix and trailing slash", "https://gw.example/inferq-1/", "https://gw.example/inferq-1/v1/tasks/big"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, func(c *harnessConfig) {
				c.model.Result.MaxResultBytes = 120
				c.configure = func(cc *consumer.Config) { cc.AdvertiseURL = tt.advertise }
			})
			h.send("big", 3, 1)
			r := h.record("big")
			if r.Status != task.StatusSuccess || len(r.Result) != 0 && string(r.Result) != "null" || r.ResultRef != tt.want {
				t.Fatalf("reply record status %s result %s result_ref %q, want SUCCESS, no result, result_ref %q", r.Status, r.Result, r.ResultRef, tt.want)
			}
		})
	}
}
