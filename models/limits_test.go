package models

import "testing"

// The broker connection's send limit covers what every model accepts (a
// body to resend, a result record to send) with room for metadata and
// tags, never less than the mq default and never over the gRPC limit.
func TestMaxMessageBytes(t *testing.T) {
	model := func(body, result int) Model {
		m := NewModel("a")
		m.Limits.MaxBodyBytes, m.Result.MaxResultBytes = body, result
		return m
	}
	for _, tc := range []struct {
		name   string
		models []Model
		want   int
	}{
		{"defaults: 64 MiB bodies", []Model{NewModel("a")}, 65 << 20},
		{"the largest model", []Model{model(8<<20, 4<<20), model(32<<20, 4<<20)}, 33 << 20},
		{"a large result", []Model{model(1<<20, 40<<20)}, 41 << 20},
		{"small models: the mq default", []Model{model(1<<20, 1<<20)}, 16 << 20},
		{"no model", nil, 16 << 20},
		{"the largest valid body", []Model{model(maxPayloadBytes, 1)}, 99 << 20},
	} {
		c := Config{Models: tc.models}
		if got := c.MaxMessageBytes(); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}
