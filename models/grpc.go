package models

import (
	"fmt"
	"os"
	"slices"

	"go.yaml.in/yaml/v3"
)

// DefaultGRPCListen is grpc.listen when the config does not set it.
const DefaultGRPCListen = "127.0.0.1:8001"

// GRPC is the Open Inference Protocol's gRPC endpoint (KServe v2's
// inference.GRPCInferenceService, Triton's gRPC API). It takes the bearer
// token of the HTTP endpoint (http.auth_token or http.auth_token_file),
// read from the call's metadata (authorization: Bearer <token>), and the
// message limit from the models' limits.max_body_bytes.
type GRPC struct {
	// Listen is the listen address: DefaultGRPCListen when the config
	// does not set it, no listener when it sets "".
	Listen string `yaml:"listen"`
	// TLSCert and TLSKey, set together, make the listener serve TLS.
	TLSCert string `yaml:"tls_cert"`
	TLSKey  string `yaml:"tls_key"`
	// MaxConcurrentRequests bounds the ModelInfer calls in progress; one
	// more is answered UNAVAILABLE at once. 0: DefaultHTTPMaxConcurrentRequests.
	MaxConcurrentRequests int `yaml:"max_concurrent_requests"`

	// listenSet: the config set listen (perhaps to "": off).
	listenSet bool
}

// grpcFields are GRPC's YAML keys.
var grpcFields = []string{"listen", "tls_cert", "tls_key", "max_concurrent_requests"}

// UnmarshalYAML decodes the grpc section, noting whether it sets listen
// (an empty listen turns the endpoint off, an absent one takes the
// default). Unknown keys are errors, as everywhere in the config.
func (g *GRPC) UnmarshalYAML(n *yaml.Node) error {
	type plain GRPC
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*g = GRPC(p)
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i].Value
		if !slices.Contains(grpcFields, k) {
			return fmt.Errorf("line %d: field %s not found in type models.GRPC", n.Content[i].Line, showKey(k))
		}
		g.listenSet = g.listenSet || k == "listen"
	}
	return nil
}

// SetDefaults fills the listen address when the config left it out.
func (g *GRPC) SetDefaults() {
	if g.Listen == "" && !g.listenSet {
		g.Listen = DefaultGRPCListen
	}
	g.listenSet = true // an override to "" later (environment, flags) stays off
}

// validate reports g's problems through top (field, message).
func (g *GRPC) validate(top func(field, format string, args ...any)) {
	if g.MaxConcurrentRequests < 0 {
		top("grpc.max_concurrent_requests", "is %d; want at least 1 (0 takes the default %d)", g.MaxConcurrentRequests, DefaultHTTPMaxConcurrentRequests)
	}
	atMost(top, "grpc.max_concurrent_requests", int64(g.MaxConcurrentRequests), maxConcurrentRequestsBound, "each may hold a request body")
	if (g.TLSCert == "") != (g.TLSKey == "") {
		top("grpc.tls_cert", "and grpc.tls_key must be set together")
	}
	for _, f := range []struct{ field, path string }{{"grpc.tls_cert", g.TLSCert}, {"grpc.tls_key", g.TLSKey}} {
		checkConfigFile(top, f.field, f.path)
	}
}

// checkConfigFile reports a set path that is not a readable file.
func checkConfigFile(top func(field, format string, args ...any), field, path string) {
	if path == "" {
		return
	}
	if fi, err := os.Stat(path); err != nil {
		top(field, "%v", err)
	} else if fi.IsDir() {
		top(field, "%s is a directory; want a file", path)
	}
}
