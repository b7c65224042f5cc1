package main

import (
	"context"
	"errors"
	"testing"

	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/oip"
	"github.com/inferq/inferq/repository"
	"github.com/inferq/inferq/worker"
)

// A model repository reaches the gRPC endpoint too: repository.AddTo sets
// the worker's Repository (Triton's repository RPCs) beside the HTTP
// routes, and its errors carry the codes' cases.
func TestWithRepositoryGRPC(t *testing.T) {
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
