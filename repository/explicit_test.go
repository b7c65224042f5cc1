package repository_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/models/examples"
	"github.com/inferq/inferq/repository"
	"github.com/inferq/inferq/tensor"
)

// post sends a repository request with the bearer token (none when
// token is "") and returns the status and body.
func post(t *testing.T, r *rig, path, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+r.w.Addr().String()+path, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func index(t *testing.T, r *rig) map[string]repository.IndexEntry {
	t.Helper()
	code, body := post(t, r, "/v2/repository/index", "secret")
	if code != http.StatusOK {
		t.Fatalf("index: %d %s", code, body)
	}
	var list []repository.IndexEntry
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]repository.IndexEntry{}
	for _, e := range list {
		out[e.Name+"/"+e.Version] = e
	}
	return out
}

// Explicit mode over HTTP: a model added to the repository is listed
// unloaded, loads on request (with the token only) and serves its queue;
// unloaded, its queue stops and a task sent meanwhile stays on the broker
// until the model is loaded again. A model that fails to load answers
// 400 with why, and the index shows it.
func TestExplicitLoadUnload(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mlp", repository.ConfigFile), mlpConfig)
	writeModel(t, dir, "mlp", 1, examples.MLP())
	r := startRig(t, dir, models.ControlExplicit, "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	writeFile(t, filepath.Join(dir, "other", repository.ConfigFile), mlpConfig)
	writeModel(t, dir, "other", 3, examples.MLPVariant(2))
	if e := index(t, r)["other/"]; e.State != repository.StateUnavailable || e.Reason != "unloaded" {
		t.Fatalf("index before load: other is %+v", e)
	}
	if code, body := post(t, r, "/v2/repository/models/other/load", ""); code != http.StatusUnauthorized {
		t.Fatalf("load without the token: %d %s", code, body)
	}
	if code, body := post(t, r, "/v2/repository/models/other/load", "secret"); code != http.StatusOK {
		t.Fatalf("load: %d %s\n%s", code, body, r.logs.String())
	}
	if e := index(t, r)["other/3"]; e.State != repository.StateReady {
		t.Fatalf("index after load: other/3 is %+v", e)
	}
	id, err := r.c.Enqueue(ctx, "other", mlpInput())
	if err != nil {
		t.Fatal(err)
	}
	if o := wait(ctx, r.c, id); o.err != nil || o.version != "3" {
		t.Fatalf("task on other: %+v", o)
	}

	if code, body := post(t, r, "/v2/repository/models/other/unload", "secret"); code != http.StatusOK {
		t.Fatalf("unload: %d %s", code, body)
	}
	if _, polled := r.w.Server().PollerStats()["inferq.other"]; polled {
		t.Fatal("the queue of an unloaded model is still polled")
	}
	if e := index(t, r)["other/"]; e.State != repository.StateUnavailable {
		t.Fatalf("index after unload: other is %+v", e)
	}
	id, err = r.c.Enqueue(ctx, "other", mlpInput())
	if err != nil {
		t.Fatal(err)
	}
	if code, body := post(t, r, "/v2/repository/models/other/load", "secret"); code != http.StatusOK {
		t.Fatalf("load again: %d %s", code, body)
	}
	if o := wait(ctx, r.c, id); o.err != nil || o.version != "3" {
		t.Fatalf("task sent while unloaded: %+v", o)
	}

	writeFile(t, filepath.Join(dir, "broken", "1", repository.ModelFile), "not an onnx model")
	code, body := post(t, r, "/v2/repository/models/broken/load", "secret")
	if code != http.StatusBadRequest || !strings.Contains(body, "broken") {
		t.Fatalf("load of a broken model: %d %s", code, body)
	}
	if e := index(t, r)["broken/1"]; e.State != repository.StateUnavailable || e.Reason == "" {
		t.Fatalf("index: broken/1 is %+v", e)
	}
	if code, body := post(t, r, "/v2/repository/models/nothere/load", "secret"); code != http.StatusNotFound {
		t.Fatalf("load of a model not in the repository: %d %s", code, body)
	}
}

// Poll mode: a new version that fails to load leaves the old one serving,
// and the index says why; once the file is fixed the next scan loads it.
func TestPollFailedLoadKeepsServing(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mlp", repository.ConfigFile), mlpConfig)
	writeModel(t, dir, "mlp", 1, examples.MLP())
	r := startRig(t, dir, models.ControlPoll, "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	writeModel(t, dir, "mlp", 2, []byte("not an onnx model"))
	waitFor(t, 30*time.Second, "version 2 listed unavailable", func() bool {
		return index(t, r)["mlp/2"].State == repository.StateUnavailable
	})
	idx := index(t, r)
	if idx["mlp/1"].State != repository.StateReady || idx["mlp/2"].Reason == "" {
		t.Fatalf("index: %+v", idx)
	}
	if code, _ := post(t, r, "/v2/repository/models/mlp/load", "secret"); code != http.StatusServiceUnavailable {
		t.Errorf("load in poll mode: %d, want 503", code)
	}
	id, err := r.c.Enqueue(ctx, "mlp", mlpInput())
	if err != nil {
		t.Fatal(err)
	}
	if o := wait(ctx, r.c, id); o.err != nil || o.version != "1" {
		t.Fatalf("task while version 2 is broken: %+v", o)
	}

	writeModel(t, dir, "mlp", 2, examples.MLPVariant(1))
	waitFor(t, 30*time.Second, "version 2 serving", func() bool {
		idx := index(t, r)
		return idx["mlp/2"].State == repository.StateReady && idx["mlp/1"].State == ""
	})
	id, err = r.c.Enqueue(ctx, "mlp", mlpInput())
	if err != nil {
		t.Fatal(err)
	}
	if o := wait(ctx, r.c, id); o.err != nil || o.version != "2" {
		t.Fatalf("task after the fix: %+v", o)
	}
}

// Poll mode: a model directory removed stops its queue (a task sent
// then stays on the broker) and one added starts serving.
func TestPollAddRemove(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mlp", repository.ConfigFile), mlpConfig)
	writeModel(t, dir, "mlp", 1, examples.MLP())
	writeFile(t, filepath.Join(dir, "other", repository.ConfigFile), mlpConfig)
	writeModel(t, dir, "other", 1, examples.MLPVariant(2))
	r := startRig(t, dir, models.ControlPoll, "")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	if err := os.Rename(filepath.Join(dir, "other"), filepath.Join(t.TempDir(), "other")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "other's queue stopped", func() bool {
		_, polled := r.w.Server().PollerStats()["inferq.other"]
		return !polled
	})
	id, err := r.c.Enqueue(ctx, "other", mlpInput())
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "other", repository.ConfigFile), mlpConfig)
	writeModel(t, dir, "other", 4, examples.MLPVariant(2))
	if o := wait(ctx, r.c, id); o.err != nil || o.version != "4" {
		t.Fatalf("task sent while other was removed: %+v", o)
	}
}

// Poll mode: version 1's file replaced in place reloads version 1: the
// records still say version 1, the outputs are the new file's, and the
// Open Inference Protocol names the serving version.
func TestPollReplaceInPlace(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mlp", repository.ConfigFile), mlpConfig)
	writeModel(t, dir, "mlp", 1, examples.MLP())
	r := startRig(t, dir, models.ControlPoll, "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	run := func() outcome {
		id, err := r.c.Enqueue(ctx, "mlp", mlpInput())
		if err != nil {
			t.Fatal(err)
		}
		return wait(ctx, r.c, id)
	}
	before := run()
	writeModel(t, dir, "mlp", 1, examples.MLPVariant(3))
	var after outcome
	waitFor(t, 60*time.Second, "the new file's outputs", func() bool {
		after = run()
		return after.err != nil || after.outputs != before.outputs
	})
	if before.err != nil || after.err != nil || before.version != "1" || after.version != "1" {
		t.Fatalf("before %+v, after %+v", before, after)
	}

	writeModel(t, dir, "mlp", 2, examples.MLP())
	waitFor(t, 60*time.Second, "version 2 in the metadata", func() bool {
		code, body := get(t, r, "/v2/models/mlp")
		var meta struct{ Versions []string }
		_ = json.Unmarshal([]byte(body), &meta)
		return code == http.StatusOK && len(meta.Versions) == 1 && meta.Versions[0] == "2"
	})
	if code, body := get(t, r, "/v2/models/mlp/versions/2/ready"); code != http.StatusOK {
		t.Errorf("version 2 ready: %d %s", code, body)
	}
}

func get(t *testing.T, r *rig, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+r.w.Addr().String()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Poll mode: a new version with other inputs and outputs takes over
// through the consumer (its queue stops and starts again with the new
// signature), and tasks for the new signature run on it.
func TestPollNewSignature(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mlp", repository.ConfigFile), mlpConfig)
	writeModel(t, dir, "mlp", 1, examples.MLP())
	r := startRig(t, dir, models.ControlPoll, "")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	writeModel(t, dir, "mlp", 2, examples.Identity("mlp", examples.Float, []int64{3}))
	waitFor(t, 30*time.Second, "version 2 serving", func() bool {
		idx := r.repo.Index(false)
		return len(idx) == 1 && idx[0].Version == "2" && idx[0].State == repository.StateReady
	})
	in := []tensor.Tensor{tensor.NewTensor("in", []int64{1, 3}, []float32{1, 2, 3})}
	id, err := r.c.Enqueue(ctx, "mlp", in)
	if err != nil {
		t.Fatal(err)
	}
	if o := wait(ctx, r.c, id); o.err != nil || o.version != "2" {
		t.Fatalf("task for the new signature: %+v\n%s", o, r.logs.String())
	}
}

// version_policy latest 2: both versions load, tasks run on the highest;
// the highest removed, the other (loaded already) serves at once.
func TestVersionPolicyLatest(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mlp", repository.ConfigFile), mlpConfig+"version_policy: {latest: 2}\n")
	writeModel(t, dir, "mlp", 1, examples.MLP())
	writeModel(t, dir, "mlp", 2, examples.MLPVariant(1))
	r := startRig(t, dir, models.ControlPoll, "")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	idx := r.repo.Index(false)
	if len(idx) != 2 || idx[0].Version != "1" || idx[1].Version != "2" || idx[0].State != repository.StateReady || idx[1].State != repository.StateReady {
		t.Fatalf("index %+v", idx)
	}
	run := func() outcome {
		id, err := r.c.Enqueue(ctx, "mlp", mlpInput())
		if err != nil {
			t.Fatal(err)
		}
		return wait(ctx, r.c, id)
	}
	if o := run(); o.err != nil || o.version != "2" {
		t.Fatalf("task: %+v", o)
	}
	if err := os.RemoveAll(filepath.Join(dir, "mlp", "2")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "version 2 unloaded", func() bool {
		idx := r.repo.Index(false)
		return len(idx) == 1 && idx[0].Version == "1"
	})
	if o := run(); o.err != nil || o.version != "1" {
		t.Fatalf("task after version 2 left: %+v", o)
	}
}
