package repository

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/inferq/inferq/models"
)

// touch writes files (path: content) under dir.
func touch(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func versions(vs []Version) []int64 {
	out := []int64{}
	for _, v := range vs {
		out = append(out, v.N)
	}
	return out
}

func TestScan(t *testing.T) {
	for _, tc := range []struct {
		name     string
		files    map[string]string
		model    string
		all      []int64 // versions found
		selected []int64
		err      string // in Entry.Err; "" none
		check    func(t *testing.T, e *Entry)
	}{
		{name: "one version, no config", files: map[string]string{"m/1/model.onnx": "x"}, model: "m",
			all: []int64{1}, selected: []int64{1},
			check: func(t *testing.T, e *Entry) {
				if e.Model.Queue != "inferq.m" || e.ConfigSum != "" {
					t.Errorf("defaults: queue %q, config sum %q", e.Model.Queue, e.ConfigSum)
				}
			}},
		{name: "latest 1 of three, numeric order", files: map[string]string{"m/2/model.onnx": "x", "m/10/model.onnx": "x", "m/9/model.onnx": "x"},
			model: "m", all: []int64{2, 9, 10}, selected: []int64{10}},
		{name: "latest 2", files: map[string]string{"m/1/model.onnx": "x", "m/2/model.onnx": "x", "m/3/model.onnx": "x",
			"m/config.yaml": "version_policy: {latest: 2}\n"}, model: "m", all: []int64{1, 2, 3}, selected: []int64{2, 3}},
		{name: "specific", files: map[string]string{"m/1/model.onnx": "x", "m/2/model.onnx": "x", "m/3/model.onnx": "x",
			"m/config.yaml": "version_policy: {specific: [1, 3, 7]}\n"}, model: "m", all: []int64{1, 2, 3}, selected: []int64{1, 3}},
		{name: "not versions: names, zero, leading zero, no model file, a file", files: map[string]string{
			"m/1/model.onnx": "x", "m/latest/model.onnx": "x", "m/0/model.onnx": "x", "m/02/model.onnx": "x",
			"m/5/other.onnx": "x", "m/6": "a file"}, model: "m", all: []int64{1}, selected: []int64{1}},
		{name: "config settings apply", files: map[string]string{"m/1/model.onnx": "x",
			"m/config.yaml": "queue: jobs\nbatching: {max_batch_size: 4}\n"}, model: "m", all: []int64{1}, selected: []int64{1},
			check: func(t *testing.T, e *Entry) {
				if e.Model.Queue != "jobs" || e.Model.DLQQueue != "jobs.dlq" || e.Model.Batching.MaxBatchSize != 4 || e.Model.Name != "m" {
					t.Errorf("model %+v", e.Model)
				}
				if e.ConfigSum == "" {
					t.Error("no config sum")
				}
			}},
		{name: "no version", files: map[string]string{"m/config.yaml": ""}, model: "m", all: []int64{}, selected: []int64{},
			err: "no version directory"},
		{name: "unknown field", files: map[string]string{"m/1/model.onnx": "x", "m/config.yaml": "max_batch: 3\n"},
			model: "m", all: []int64{1}, selected: []int64{1}, err: "max_batch"},
		{name: "other name", files: map[string]string{"m/1/model.onnx": "x", "m/config.yaml": "name: n\n"},
			model: "m", all: []int64{1}, selected: []int64{1}, err: "the directory names the model"},
		{name: "path set", files: map[string]string{"m/1/model.onnx": "x", "m/config.yaml": "path: /x.onnx\n"},
			model: "m", all: []int64{1}, selected: []int64{1}, err: "path is set"},
		{name: "bad policy", files: map[string]string{"m/1/model.onnx": "x", "m/config.yaml": "version_policy: {latest: 1, specific: [1]}\n"},
			model: "m", all: []int64{1}, selected: []int64{1}, err: "not both"},
		{name: "unknown policy field", files: map[string]string{"m/1/model.onnx": "x", "m/config.yaml": "version_policy: {all: {}}\n"},
			model: "m", all: []int64{1}, selected: []int64{1}, err: "all"},
		{name: "invalid setting", files: map[string]string{"m/1/model.onnx": "x", "m/config.yaml": "batching: {max_batch_size: 0}\n"},
			model: "m", all: []int64{1}, selected: []int64{1}, err: "max_batch_size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			touch(t, dir, tc.files)
			touch(t, dir, map[string]string{".hidden/1/model.onnx": "x", "README": "x"})
			entries, err := Scan(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 1 {
				t.Fatalf("entries %v", entries)
			}
			e := entries[tc.model]
			if e == nil {
				t.Fatalf("no entry %q", tc.model)
			}
			if got := versions(e.Versions); !slices.Equal(got, tc.all) {
				t.Errorf("versions %v, want %v", got, tc.all)
			}
			if got := versions(e.Selected()); !slices.Equal(got, tc.selected) {
				t.Errorf("selected %v, want %v", got, tc.selected)
			}
			switch {
			case tc.err == "" && e.Err != nil:
				t.Errorf("err %v", e.Err)
			case tc.err != "" && (e.Err == nil || !strings.Contains(e.Err.Error(), tc.err)):
				t.Errorf("err %v, want one saying %q", e.Err, tc.err)
			}
			if tc.check != nil && e.Err == nil {
				tc.check(t, e)
			}
		})
	}
}

// A changed model file has another stamp; the same file rescanned, the
// same.
func TestScanStamp(t *testing.T) {
	dir := t.TempDir()
	touch(t, dir, map[string]string{"m/1/model.onnx": "one"})
	a, _ := Scan(dir)
	b, _ := Scan(dir)
	if a["m"].Versions[0].Stamp != b["m"].Versions[0].Stamp {
		t.Error("unchanged file, other stamp")
	}
	touch(t, dir, map[string]string{"m/1/model.onnx": "other"})
	c, _ := Scan(dir)
	if a["m"].Versions[0].Stamp == c["m"].Versions[0].Stamp {
		t.Error("changed file, same stamp")
	}
}

func TestScanMissingDir(t *testing.T) {
	if _, err := Scan(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("no error for a missing repository")
	}
}

// A repository model also in models: is a configuration error naming it.
func TestOpenRefusesStaticName(t *testing.T) {
	dir := t.TempDir()
	touch(t, dir, map[string]string{"mlp/1/model.onnx": "x"})
	_, err := Open(t.Context(), Config{Dir: dir, Static: []string{"mlp"}, Load: nil})
	if err == nil {
		t.Fatal("no error")
	}
	_, err = Open(t.Context(), Config{Dir: dir, Static: []string{"mlp"}, Mode: models.ControlPoll,
		Load: func(ctx context.Context, m models.Model) (*Instance, error) { return nil, errors.New("not called") }})
	if err == nil || !strings.Contains(err.Error(), `"mlp"`) || !strings.Contains(err.Error(), "models:") {
		t.Fatalf("err %v", err)
	}
}
