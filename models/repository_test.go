package models

import (
	"strings"
	"testing"
	"time"
)

func TestRepositoryConfig(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, err string
		check           func(t *testing.T, c *Config)
	}{
		{name: "repository instead of models", yaml: "model_repository: /models\n",
			check: func(t *testing.T, c *Config) {
				if c.ModelRepository != "/models" || c.ModelControlMode != ControlNone || c.RepositoryPoll.D() != 15*time.Second {
					t.Errorf("%+v", c.Repository)
				}
			}},
		{name: "poll", yaml: "model_repository: /m\nmodel_control_mode: poll\nrepository_poll: 2s\n",
			check: func(t *testing.T, c *Config) {
				if c.ModelControlMode != ControlPoll || c.RepositoryPoll.D() != 2*time.Second {
					t.Errorf("%+v", c.Repository)
				}
			}},
		{name: "neither", yaml: "broker: {address: x:1}\n", err: "no model is configured"},
		{name: "mode without repository", yaml: "model_control_mode: explicit\nmodels: [{name: m, path: m.onnx}]\n", err: "model_control_mode"},
		{name: "unknown mode", yaml: "model_repository: /m\nmodel_control_mode: watch\n", err: "want none, poll or explicit"},
		{name: "negative poll", yaml: "model_repository: /m\nrepository_poll: -1s\n", err: "repository_poll"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.yaml))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}
