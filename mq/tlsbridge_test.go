package mq

import (
	"crypto/tls"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The TLS bridge's socket lives in the temp dir: when that is absent or
// not writable (a read-only root file system without a /tmp volume), the
// error says so and names the variable to set, not just "stat ...: no such
// file or directory" (issue 27 item 7).
func TestTLSBridgeTempDirError(t *testing.T) {
	cases := map[string]string{
		"absent":   filepath.Join(t.TempDir(), "missing"),
		"too long": filepath.Join(t.TempDir(), strings.Repeat("d", 120)),
	}
	if os.Geteuid() != 0 { // root writes a read-only directory all the same
		ro := t.TempDir()
		if err := os.Chmod(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(ro, 0o700) })
		cases["read-only"] = ro
	}
	if err := os.MkdirAll(cases["too long"], 0o700); err != nil {
		t.Fatal(err)
	}
	cases["a file"] = filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(cases["a file"], nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, dir := range cases {
		t.Run(name, func(t *testing.T) {
			t.Setenv("TMPDIR", dir)
			b, err := newTLSBridge(t.Context(), "127.0.0.1:1", &tls.Config{}, slog.New(slog.DiscardHandler), time.Minute)
			if err == nil {
				b.close()
				t.Fatalf("TMPDIR %s: no error", dir)
			}
			for _, want := range []string{"mq: tls bridge", "TMPDIR", dir, "writable"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
	// A usable temp dir works, and close removes the socket's directory.
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	b, err := newTLSBridge(t.Context(), "127.0.0.1:1", &tls.Config{}, slog.New(slog.DiscardHandler), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	b.close()
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("temp dir holds %v after close", ents)
	}
}
