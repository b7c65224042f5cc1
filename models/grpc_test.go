package models

import (
	"strings"
	"testing"
)

// grpc.listen: the default when the config leaves it out, no listener
// when it says "", the address it gives otherwise; unknown keys and a
// lone TLS file are errors.
func TestGRPCConfig(t *testing.T) {
	for _, tt := range []struct {
		name, yaml, listen, err string
	}{
		{"absent", "", DefaultGRPCListen, ""},
		{"section without listen", "grpc: {max_concurrent_requests: 3}\n", DefaultGRPCListen, ""},
		{"off", "grpc: {listen: \"\"}\n", "", ""},
		{"set", "grpc: {listen: 0.0.0.0:9001}\n", "0.0.0.0:9001", ""},
		{"unknown key", "grpc: {listn: x}\n", "", "listn"},
		{"lone cert", "grpc: {tls_cert: /nonexistent}\n", "", "grpc.tls_cert"},
		{"negative cap", "grpc: {max_concurrent_requests: -1}\n", "", "grpc.max_concurrent_requests"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml + minimal))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want one naming %s", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.GRPC.Listen != tt.listen {
				t.Errorf("grpc.listen %q, want %q", c.GRPC.Listen, tt.listen)
			}
			c.SetDefaults() // again, as serve does after the environment
			if c.GRPC.Listen != tt.listen {
				t.Errorf("grpc.listen after a second SetDefaults %q, want %q", c.GRPC.Listen, tt.listen)
			}
		})
	}
}
