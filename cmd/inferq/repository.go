package main

import (
	"context"
	"log/slog"

	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/repository"
	"github.com/inferq/inferq/runtime"
	"github.com/inferq/inferq/worker"
)

// openRepository opens c's model_repository (nil without one): its models
// load like those of models:, each placed on its own when it loads.
func openRepository(ctx context.Context, log *slog.Logger, c *models.Config, env *runtime.Env, o worker.LoadOptions) (*repository.Repository, error) {
	r := c.Repository
	if r.ModelRepository == "" {
		return nil, nil
	}
	static := make([]string, len(c.Models))
	for i, m := range c.Models {
		static[i] = m.Name
	}
	placer := func(m models.Model) (runtime.Placement, error) {
		ps, err := place(log, []models.Model{m})
		if err != nil {
			return runtime.Placement{}, err
		}
		return ps[0], nil
	}
	return repository.Open(ctx, repository.Config{
		Dir: r.ModelRepository, Mode: r.ModelControlMode, Poll: r.RepositoryPoll.D(), Static: static,
		Load: repository.ORTLoader(env, placer, o), Logger: log.With("component", "repository"),
	})
}

// withRepository adds repo's models, devices, batchers, HTTP routes and
// gRPC control to wc (repo may be nil).
func withRepository(wc worker.Config, repo *repository.Repository) worker.Config {
	if repo == nil {
		return wc
	}
	wc.Models = append(wc.Models, repo.Models()...)
	if wc.Devices == nil {
		wc.Devices = map[string][]string{}
	}
	for name, ds := range repo.Devices() {
		wc.Devices[name] = ds
	}
	wc.Background = append(wc.Background, repo.Run)
	wc.Routes = repository.Routes(repo)
	wc.Repository = repository.Control(repo)
	return wc
}
