package client_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/inferq/inferq/client"
	"github.com/inferq/inferq/task"
)

// A producer's reply channel must pass the worker's name rule
// (task.CheckName): a worker refuses every task whose reply_to does not,
// so such a Config is refused at once, naming the field.
func TestConfigNamesFollowTheWorkersRule(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  client.Config
		ok   bool
	}{
		{"plain identity", client.Config{Identity: "svc-a_1.eu"}, true},
		{"identity ending in a dot", client.Config{Identity: "svc."}, false},
		{"identity with a doubled dot", client.Config{Identity: "a..b"}, false},
		{"identity with a colon", client.Config{Identity: "a:b"}, false},
		{"reply channel with routing", client.Config{Identity: "a", ReplyChannel: "r;queues:x"}, false},
		{"reply channel with a space", client.Config{Identity: "a", ReplyChannel: "r x"}, false},
		{"reply channel overridden, valid", client.Config{Identity: "a", ReplyChannel: "replies.a"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Broker.Address = "127.0.0.1:1"
			err := cfg.Validate()
			if tc.ok != (err == nil) {
				t.Fatalf("Validate: %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, task.ErrBadName) {
				t.Errorf("error %v does not wrap task.ErrBadName", err)
			}
		})
	}
}

// HostIdentity names a producer after its machine: the prefix, then the host
// name with what an identity may not carry replaced.
func TestHostIdentity(t *testing.T) {
	id := client.HostIdentity("cli-")
	rest, ok := strings.CutPrefix(id, "cli-")
	if !ok || rest == "" || strings.Trim(rest, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") != "" {
		t.Errorf("HostIdentity(cli-) = %q", id)
	}
}
