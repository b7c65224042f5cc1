package repository

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inferq/inferq/models"
)

// A hostile config.yaml dropped into a repository (issue 27, item 1) is
// refused by the scan with the model, the field and the bound named, the
// model stays UNAVAILABLE with that reason, and the loader is never asked
// to build it: no makechan panic, no warm-up out of memory, no file
// content in the reason, no scan blocked on a named pipe.
func TestHostileConfigYAML(t *testing.T) {
	const mark = "Zq9X"
	dir := t.TempDir()
	secret := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(secret, []byte(mark+"s3cr3t-t0ken-value\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"queue/config.yaml":  "batching: {max_queue_size: 9000000000000000000}\n",
		"batch/config.yaml":  "batching: {max_batch_size: 1099511627776}\n",
		"policy/config.yaml": "version_policy: {latest: 1000000}\n",
		"big/config.yaml":    strings.Repeat("# padding\n", models.MaxConfigBytes/10+1),
	}
	for _, m := range []string{"queue", "batch", "policy", "big", "secret", "fifo"} {
		files[m+"/1/model.onnx"] = "x"
	}
	touch(t, dir, files)
	if err := os.Symlink(secret, filepath.Join(dir, "secret", ConfigFile)); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo", ConfigFile), 0o600); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"queue":  {`model "queue": batching.max_queue_size: must be at most 1048576`},
		"batch":  {`model "batch": batching.max_batch_size: must be at most 65536`},
		"policy": {`version_policy.latest`, "at most 64"},
		"big":    {`model "big"`, strconv.Itoa(models.MaxConfigBytes)},
		"secret": {`model "secret": config.yaml: `, "line 1"},
		"fifo":   {`model "fifo"`, "not a regular file"},
	}

	done := make(chan map[string]*Entry, 1)
	go func() {
		entries, err := Scan(dir)
		if err != nil {
			t.Error(err)
		}
		done <- entries
	}()
	var entries map[string]*Entry
	select {
	case entries = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Scan blocks")
	}
	for name, subs := range want {
		e := entries[name]
		if e == nil || e.Err == nil {
			t.Errorf("%s: no error (%+v)", name, e)
			continue
		}
		for _, s := range subs {
			if !strings.Contains(e.Err.Error(), s) {
				t.Errorf("%s: error %q does not contain %q", name, e.Err, s)
			}
		}
		if strings.Contains(e.Err.Error(), mark) {
			t.Errorf("%s: error shows the file's content: %v", name, e.Err)
		}
	}

	// Opened in poll mode, none of them reaches the loader, and each is
	// listed UNAVAILABLE with its reason.
	r, err := Open(t.Context(), Config{Dir: dir, Mode: models.ControlPoll,
		Load: func(ctx context.Context, m models.Model) (*Instance, error) {
			t.Errorf("the loader was asked to build %s", m.Name)
			return nil, errors.New("not called")
		}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range r.Index(false) {
		if _, ok := want[e.Name]; !ok || e.Version != "" {
			continue
		}
		seen[e.Name] = true
		if e.State != StateUnavailable || e.Reason == "" || strings.Contains(e.Reason, mark) {
			t.Errorf("index: %+v, want UNAVAILABLE with a reason that shows no content", e)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("index lists %v of %d models", seen, len(want))
	}
}
