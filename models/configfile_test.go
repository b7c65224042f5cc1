package models

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A config file is read up to MaxConfigBytes: a larger one is refused,
// naming the limit, before it is held in memory (300 MB of comments took
// the process from 71 MB to 2.1 GB).
func TestLoadRefusesLargeFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.yaml")
	data := []byte(minimal + strings.Repeat("# padding\n", MaxConfigBytes/10+1))
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), strconv.Itoa(MaxConfigBytes)) {
		t.Fatalf("Load of a %d-byte file: %v, want an error naming the file and the limit of %d bytes", len(data), err, MaxConfigBytes)
	}
	if _, err := Parse(data); err == nil || !strings.Contains(err.Error(), strconv.Itoa(MaxConfigBytes)) {
		t.Fatalf("Parse of %d bytes: %v, want an error naming the limit", len(data), err)
	}
	// At the limit it is read.
	if err := os.WriteFile(p, data[:MaxConfigBytes], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err != nil {
		t.Fatalf("Load of a file at the limit: %v", err)
	}
}

// A config file that is not a regular file (a named pipe nobody writes)
// is refused at once instead of blocking the load, or a repository scan,
// for good.
func TestLoadRefusesFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo.yaml")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := ReadConfigFile(p)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("ReadConfigFile of a FIFO: %v, want 'not a regular file'", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadConfigFile of a FIFO blocks")
	}
}

// secretMark starts every secret below: no error may show it.
const secretMark = "Zq9X"

// Errors about a config file say the line and the field, never the file's
// content: a config.yaml symlinked to a secrets file (a token, a key) must
// not show its first bytes in the load error, which the repository index
// serves to API clients.
func TestDecodeErrorsDoNotEchoContent(t *testing.T) {
	for _, tc := range []struct{ name, data string }{
		{"a token", secretMark + "ghp1234567890abcdef\n"},
		{"a JWT", secretMark + "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln\n"},
		{"a PEM key", secretMark + "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC\n-----END PRIVATE KEY-----\n"},
		{"an env file", secretMark + "_TOKEN=abcdef\nOTHER=1\n"},
		{"a list", "- " + secretMark + "abcdefgh\n"},
		{"an anchor", "*" + secretMark + "anchor\n"},
		{"a key that is no identifier", secretMark + "@secret!: 1\n"},
		{"a device", "device: " + secretMark + "xyz\n"},
		{"a duration", "timeout: " + secretMark + "xyz\n"},
		{"a size", "cuda: {gpu_mem_limit: " + secretMark + "xyz}\n"},
		{"a number", "instances: " + secretMark + "xyz\n"},
		{"a struct", "batching: " + secretMark + "xyz\n"},
		{"a name", "name: " + secretMark + "xyz\n"},
		{"a nested list", "batching: {preferred_batch_sizes: [" + secretMark + "xyz]}\n"},
		{"tabs", "\t" + secretMark + ": x\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ParseModel([]byte(tc.data), "m", "m/1/model.onnx")
			if err == nil {
				t.Fatalf("ParseModel accepted %q", tc.data)
			}
			if strings.Contains(err.Error(), secretMark) {
				t.Errorf("ParseModel error shows the file's content: %v", err)
			}
			if _, err := Parse([]byte(tc.data)); err == nil || strings.Contains(err.Error(), secretMark) {
				t.Errorf("Parse error shows the file's content (or none): %v", err)
			}
			if tc.name == "a name" {
				return // in the main config a model's name identifies it in every error
			}
			if _, err := Parse([]byte("models:\n  - " + strings.ReplaceAll(strings.TrimSuffix(tc.data, "\n"), "\n", "\n    ") + "\n")); err != nil && strings.Contains(err.Error(), secretMark) {
				t.Errorf("Parse error of a models: entry shows the file's content: %v", err)
			}
		})
	}
}

// The attack itself: a config file that is a symlink to a secrets file.
func TestLoadSymlinkedSecretShowsNothing(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "token")
	if err := os.WriteFile(secret, []byte(secretMark+"s3cr3t-t0ken-value\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "config.yaml")
	if err := os.Symlink(secret, p); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	if err == nil || strings.Contains(err.Error(), secretMark) || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("Load of a symlinked secret: %v; want an error naming line 1 without the content", err)
	}
}

// What the errors still say: the line and, for a key that is a plausible
// field name, the key (a typo must stay easy to find).
func TestDecodeErrorsNameLineAndField(t *testing.T) {
	for _, tc := range []struct{ data, want string }{
		{"models: [{name: a, path: a.onnx, batch_size: 3}]", "field batch_size not found"},
		{"modles: []", "line 1: field modles not found"},
		{"models: [{name: a, path: a.onnx, device: tpu}]", "line 1: device: want auto, cpu, cuda or a list of GPU indexes"},
		{"models: [{name: a, path: a.onnx, timeout: 5}]", "line 1: not a duration"},
		{"models: [{name: a, path: a.onnx, instances: many}]", "line 1: cannot unmarshal !!str into int"},
		{"results: {spool: tape}\n" + minimal, "line 1: results.spool: want disk or memory"},
		{"models: [{name: a, path: a.onnx, cuda: {gpu_mem_limit: lots}}]", "cuda.gpu_mem_limit: line 1: not a size"},
		{"models: [{name: a, path: a.onnx}]\nmodels: []", "line 2: mapping key models defined twice (first at line 1)"},
		{"*a", "yaml: unknown anchor referenced"},
		{"models: [\n", "line 1: did not find expected node content"},
	} {
		_, err := Parse([]byte(tc.data))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", tc.data, err, tc.want)
		}
	}
}
