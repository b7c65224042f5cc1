package repository

import (
	"context"
	"strings"
	"testing"

	"github.com/inferq/inferq/models"
)

// A load that panics fails its version, which is listed UNAVAILABLE with
// the reason, instead of taking the process down (a gRPC
// RepositoryModelLoad, whose panics grpc-go does not recover) or leaving
// the model LOADING for good (an HTTP load, where net/http swallows it).
func TestLoadPanicIsRecovered(t *testing.T) {
	dir := t.TempDir()
	touch(t, dir, map[string]string{"mlp/1/model.onnx": "x"})
	r, err := Open(t.Context(), Config{Dir: dir, Mode: models.ControlExplicit,
		Load: func(ctx context.Context, m models.Model) (*Instance, error) { panic("makechan: size out of range") }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	if err := r.Load(t.Context(), "mlp"); err == nil || !strings.Contains(err.Error(), "makechan") {
		t.Errorf("load: %v, want the panic as an error", err)
	}
	found := false
	for _, e := range r.Index(false) {
		if e.Name != "mlp" {
			continue
		}
		found = true
		if e.State != StateUnavailable || !strings.Contains(e.Reason, "internal error") {
			t.Errorf("index: %+v, want UNAVAILABLE with the reason", e)
		}
	}
	if !found {
		t.Error("mlp is not in the index")
	}
}
