package models

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The http section's defaults: timeouts and the concurrency cap are set
// when the file leaves them out.
func TestHTTPDefaults(t *testing.T) {
	c, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	h := c.HTTP
	if h.ReadHeaderTimeout.D() != 5*time.Second || h.ReadTimeout.D() != time.Minute || h.WriteTimeout.D() != time.Minute ||
		h.IdleTimeout.D() != 2*time.Minute || h.MaxConcurrentRequests != 64 || h.AuthToken != "" {
		t.Errorf("http defaults %+v", h)
	}
	c, err = Parse([]byte("http: {read_timeout: 5m, max_concurrent_requests: 3}\n" + minimal))
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTP.ReadTimeout.D() != 5*time.Minute || c.HTTP.MaxConcurrentRequests != 3 || c.HTTP.WriteTimeout != DefaultHTTPWriteTimeout {
		t.Errorf("http %+v", c.HTTP)
	}
}

func TestHTTPValidate(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	tests := []struct {
		name string
		http string
		want string // "" when valid
	}{
		{"tls both", "{tls_cert: " + file + ", tls_key: " + file + "}", ""},
		{"token", "{auth_token: s3cret}", ""},
		{"token file", "{auth_token_file: " + file + "}", ""},
		{"negative read timeout", "{read_timeout: -1s}", "http.read_timeout: is -1s"},
		{"negative header timeout", "{read_header_timeout: -1s}", "http.read_header_timeout"},
		{"negative write timeout", "{write_timeout: -1s}", "http.write_timeout"},
		{"negative idle timeout", "{idle_timeout: -1s}", "http.idle_timeout"},
		{"negative cap", "{max_concurrent_requests: -1}", "http.max_concurrent_requests: is -1"},
		{"tls cert alone", "{tls_cert: " + file + "}", "http.tls_cert: and http.tls_key must be set together"},
		{"tls key alone", "{tls_key: " + file + "}", "http.tls_cert: and http.tls_key must be set together"},
		{"tls cert missing", "{tls_cert: " + missing + ", tls_key: " + file + "}", "http.tls_cert: stat " + missing},
		{"tls key a directory", "{tls_cert: " + file + ", tls_key: " + dir + "}", "http.tls_key: " + dir + " is a directory"},
		{"token and file", "{auth_token: a, auth_token_file: " + file + "}", "http.auth_token: and http.auth_token_file are both set"},
		{"token file missing", "{auth_token_file: " + missing + "}", "http.auth_token_file: stat"},
		{"token with spaces", "{auth_token: ' a '}", "http.auth_token: has leading or trailing whitespace"},
		{"advertise url", "{advertise_url: 'http://inferq-0.inferq-headless.inferq.svc:8080'}", ""},
		{"advertise url https with a path and a slash", "{advertise_url: 'https://gw.example/inferq-0/'}", ""},
		{"advertise url relative", "{advertise_url: /v1}", `http.advertise_url: "/v1" is not an absolute http:// or https:// URL`},
		{"advertise url no scheme", "{advertise_url: 'inferq-0:8080'}", "http.advertise_url: \"inferq-0:8080\" is not an absolute"},
		{"advertise url other scheme", "{advertise_url: 'ftp://h/'}", "http.advertise_url: \"ftp://h/\" is not an absolute"},
		{"advertise url no host", "{advertise_url: 'http:///x'}", "http.advertise_url: \"http:///x\" has no host"},
		{"advertise url query", "{advertise_url: 'http://h:8080?a=b'}", "http.advertise_url: \"http://h:8080?a=b\" has a query"},
		{"advertise url empty query", "{advertise_url: 'http://h:8080?'}", "http.advertise_url: \"http://h:8080?\" has a query"},
		{"advertise url fragment", "{advertise_url: 'http://h#x'}", "http.advertise_url: \"http://h#x\" has a fragment"},
		{"advertise url user", "{advertise_url: 'http://u:p@h'}", "http.advertise_url: \"http://u:p@h\" has user info"},
		{"advertise url unparsable", "{advertise_url: 'http://h:port'}", "http.advertise_url: \"http://h:port\" is not a URL"},
		{"unknown field", "{auth: x}", "field auth not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte("http: " + tt.http + "\n" + minimal))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// The bearer token is masked in what --print-config prints, like the
// broker's.
func TestHTTPTokenMasked(t *testing.T) {
	c, err := Parse([]byte("http: {auth_token: s3cret-http}\n" + minimal))
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Masked().YAML()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "s3cret-http") || !strings.Contains(string(out), "auth_token: '*****'") {
		t.Errorf("masked config:\n%s", out)
	}
	if c.HTTP.AuthToken != "s3cret-http" {
		t.Error("Masked changed the config it was called on")
	}
}

func TestHTTPToken(t *testing.T) {
	dir := t.TempDir()
	file, empty := filepath.Join(dir, "token"), filepath.Join(dir, "empty")
	if err := os.WriteFile(file, []byte("  from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		h    HTTP
		want string
		err  string
	}{
		{"none", HTTP{}, "", ""},
		{"inline", HTTP{AuthToken: "t"}, "t", ""},
		{"file, trimmed", HTTP{AuthTokenFile: file}, "from-file", ""},
		{"empty file", HTTP{AuthTokenFile: empty}, "", "http.auth_token_file: " + empty + " is empty"},
		{"missing file", HTTP{AuthTokenFile: filepath.Join(dir, "nope")}, "", "http.auth_token_file: open"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.h.Token()
			if got != tt.want || (err == nil) != (tt.err == "") || err != nil && !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Token() = %q, %v; want %q, %q", got, err, tt.want, tt.err)
			}
		})
	}
}
