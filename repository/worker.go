package repository

import (
	"context"
	"log/slog"

	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/worker"
)

// FromConfig opens c's model_repository with load (nil, nil without one):
// its control mode and poll interval are the config's, and the names of
// its models: list are static, so that no repository model takes one.
func FromConfig(ctx context.Context, c *models.Config, load Loader, log *slog.Logger) (*Repository, error) {
	r := c.Repository
	if r.ModelRepository == "" {
		return nil, nil
	}
	static := make([]string, len(c.Models))
	for i, m := range c.Models {
		static[i] = m.Name
	}
	return Open(ctx, Config{
		Dir: r.ModelRepository, Mode: r.ModelControlMode, Poll: r.RepositoryPoll.D(), Static: static,
		Load: load, Logger: log.With("component", "repository"),
	})
}

// AddTo adds r's models, devices, batchers (Run, beside the worker's), HTTP
// routes and gRPC control to wc; r may be nil.
func AddTo(wc worker.Config, r *Repository) worker.Config {
	if r == nil {
		return wc
	}
	wc.Models = append(wc.Models, r.Models()...)
	if wc.Devices == nil {
		wc.Devices = map[string][]string{}
	}
	for name, ds := range r.Devices() {
		wc.Devices[name] = ds
	}
	wc.Background = append(wc.Background, r.Run)
	wc.Routes = Routes(r)
	wc.Repository = Control(r)
	return wc
}
