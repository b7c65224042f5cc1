package repository_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/oip"
	"github.com/inferq/inferq/repository"
	"github.com/inferq/inferq/worker"
)

// A model repository reaches the gRPC endpoint too: AddTo sets
// the worker's Repository (Triton's repository RPCs) beside the HTTP
// routes, and its errors carry the codes' cases.
func TestAddToGRPC(t *testing.T) {
	if wc := repository.AddTo(worker.Config{}, nil); wc.Repository != nil || wc.Routes != nil {
		t.Fatalf("without a repository: %+v", wc)
	}
	noLoad := func(context.Context, models.Model) (*repository.Instance, error) {
		return nil, errors.New("no loads here")
	}
	repo, err := repository.Open(context.Background(), repository.Config{Dir: t.TempDir(), Mode: models.ControlPoll, Load: noLoad})
	if err != nil {
		t.Fatal(err)
	}
	wc := repository.AddTo(worker.Config{}, repo)
	if wc.Routes == nil || wc.Repository == nil {
		t.Fatalf("with a repository: routes %v, gRPC repository %v", wc.Routes != nil, wc.Repository)
	}
	if err := wc.Repository.Load(context.Background(), "mlp"); !errors.Is(err, oip.ErrRepositoryNotExplicit) {
		t.Errorf("load in poll mode: %v, want ErrRepositoryNotExplicit", err)
	}
}

// FromConfig opens nothing without model_repository, and names the
// models: list as static, so a repository model of such a name is refused.
func TestFromConfig(t *testing.T) {
	noLoad := func(context.Context, models.Model) (*repository.Instance, error) {
		return nil, errors.New("no loads here")
	}
	log := slog.New(slog.DiscardHandler)
	if r, err := repository.FromConfig(t.Context(), &models.Config{}, noLoad, log); r != nil || err != nil {
		t.Fatalf("without model_repository: %v, %v", r, err)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mlp", "1", repository.ModelFile), "x")
	c := &models.Config{Models: []models.Model{models.NewModel("mlp")}}
	c.Repository.ModelRepository, c.Repository.ModelControlMode = dir, models.ControlPoll
	if _, err := repository.FromConfig(t.Context(), c, noLoad, log); err == nil || !strings.Contains(err.Error(), `"mlp"`) {
		t.Fatalf("a repository model named as a static one: %v", err)
	}
}
