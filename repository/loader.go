package repository

import (
	"context"

	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/runtime"
	"github.com/inferq/inferq/worker"
)

// Placer decides a model's devices (serve plans GPUs with NVML).
type Placer func(m models.Model) (runtime.Placement, error)

// ORTLoader loads versions with onnxruntime the way serve loads the
// models: list (worker.LoadModels): sessions on the devices place gives,
// each warmed with o.Warm, behind the model's batcher.
func ORTLoader(env *runtime.Env, place Placer, o worker.LoadOptions) Loader {
	return func(ctx context.Context, m models.Model) (*Instance, error) {
		p, err := place(m)
		if err != nil {
			return nil, err
		}
		loaded, err := worker.LoadModels(ctx, env, []models.Model{m}, []runtime.Placement{p}, o)
		if err != nil {
			loaded.Close()
			return nil, err
		}
		l := loaded[0]
		return &Instance{Info: l.Info, Batcher: l.Batcher, MaxInFlight: p.MaxInFlight(),
			Devices: loaded.Devices()[m.Name], Close: loaded.Close}, nil
	}
}

// CPUPlacer places a model with no GPU to use: device auto and cpu run
// on the CPU (tests, and hosts without a GPU).
func CPUPlacer(m models.Model) (runtime.Placement, error) {
	ps, err := runtime.Place([]models.Model{m}, nil, "no GPU")
	if err != nil {
		return runtime.Placement{}, err
	}
	return ps[0], nil
}
