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
	placer := func(m models.Model) (runtime.Placement, error) {
		ps, err := place(log, []models.Model{m})
		if err != nil {
			return runtime.Placement{}, err
		}
		return ps[0], nil
	}
	return repository.FromConfig(ctx, c, repository.ORTLoader(env, placer, o), log)
}
