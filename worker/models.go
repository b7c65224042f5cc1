package worker

import (
	"context"
	"fmt"
	"log/slog"
	goruntime "runtime"
	"time"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/runtime"
	"github.com/inferq/inferq/tensor"
)

// SessionOptions say how OpenSessions prepares a model's sessions.
type SessionOptions struct {
	// Concurrent is how many sessions of every model may run at once in
	// the process: it sizes each session's intra-op threads.
	Concurrent int
	// WarmRows is the row count of the synthetic warm-up batch run on each
	// session; 0 skips the warm-up.
	WarmRows int
	Logger   *slog.Logger
}

// OpenSessions opens one session of m on each of devs, with m's CUDA
// settings, and warms each. On error it returns the sessions opened so far
// with the error: the caller closes them.
func OpenSessions(ctx context.Context, env *runtime.Env, m models.Model, devs []runtime.Device, o SessionOptions) ([]*runtime.Session, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var out []*runtime.Session
	for _, d := range devs {
		start := time.Now()
		s, err := runtime.NewSession(env, runtime.SessionConfig{
			Name: m.Name, Path: m.Path, Device: d, CPUs: goruntime.NumCPU(), ConcurrentSessions: o.Concurrent,
			IntraOpThreads: m.IntraOpThreads, Logger: log,
			GPUMemLimit: int64(m.CUDA.GPUMemLimit), ArenaExtendStrategy: m.CUDA.ArenaExtendStrategy,
			CUDNNConvAlgoSearch: m.CUDA.CUDNNConvAlgoSearch, DoCopyInDefaultStream: &m.CUDA.DoCopyInDefaultStream,
			TensorRT: m.CUDA.TensorRT && d.Kind == runtime.KindCUDA,
		})
		if err != nil {
			return out, fmt.Errorf("model %q on %s: %w", m.Name, d, err)
		}
		out = append(out, s)
		if o.WarmRows > 0 {
			if err := s.Warmup(ctx, o.WarmRows); err != nil {
				return out, fmt.Errorf("model %q: warm-up on %s: %w", m.Name, d, err)
			}
		}
		log.Info("model loaded", "model", m.Name, "device", d.String(), "threads", s.IntraOpThreads(), "took", time.Since(start).Round(time.Millisecond))
	}
	return out, nil
}

// NewBatcher builds m's dynamic batcher over runners: m's max_batch_size,
// queue delay and concurrency, and those of its preferred batch sizes that
// fit the max. obs may be nil.
func NewBatcher(m models.Model, runners []batch.Runner, obs batch.Observer, log *slog.Logger) (*batch.Batcher, error) {
	pol := batch.Policy{MaxBatchSize: m.Batching.MaxBatchSize, MaxQueueDelay: m.Batching.MaxQueueDelay.D(),
		PriorityLevels: m.Batching.PriorityLevels, PriorityAging: m.Batching.Aging()}
	for _, p := range m.Batching.PreferredBatchSizes {
		if p <= pol.MaxBatchSize {
			pol.PreferredBatchSizes = append(pol.PreferredBatchSizes, p)
		}
	}
	if obs == nil {
		obs = nopObserver{}
	}
	b, err := batch.New(batch.Config{
		Name: m.Name, Policy: pol, Runners: runners, Concurrency: m.Concurrency, Observer: obs, Logger: log,
		QueueSize: m.Batching.MaxQueueSize, // 0: the batcher's default bound
	})
	if err != nil {
		return nil, fmt.Errorf("model %q: batcher: %w", m.Name, err)
	}
	return b, nil
}

type nopObserver struct{}

func (nopObserver) ObserveQueueWait(time.Duration) {}
func (nopObserver) ObserveBatch(batch.Stats)       {}

// LoadedModel is one model with its sessions and batcher.
type LoadedModel struct {
	Config    models.Model
	Placement runtime.Placement
	Info      tensor.ModelInfo
	Sessions  []*runtime.Session
	Batcher   *batch.Batcher
}

// Loaded is the models LoadModels loaded, in config order.
type Loaded []*LoadedModel

// LoadOptions say how LoadModels prepares the models.
type LoadOptions struct {
	// Warm runs a max_batch_size warm-up batch on every session.
	Warm bool
	// Wrap, when set, wraps every session before it joins the batcher
	// (the fault-injection build uses it).
	Wrap func(batch.Runner) batch.Runner
	// Observer, when set, returns the batch observer of a model.
	Observer func(model string) batch.Observer
	Logger   *slog.Logger
}

// LoadModels opens every model's sessions on its placement's devices,
// warms them and builds its batcher. ps[i] is the placement of ms[i]. On
// error it returns what it loaded with the error: the caller closes it.
func LoadModels(ctx context.Context, env *runtime.Env, ms []models.Model, ps []runtime.Placement, o LoadOptions) (Loaded, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	concurrent := 0
	for i := range ms {
		concurrent += ps[i].Runs()
	}
	var out Loaded
	for i, m := range ms {
		l := &LoadedModel{Config: m, Placement: ps[i]}
		out = append(out, l)
		so := SessionOptions{Concurrent: concurrent, Logger: log}
		if o.Warm {
			so.WarmRows = m.Batching.MaxBatchSize
		}
		var err error
		if l.Sessions, err = OpenSessions(ctx, env, m, ps[i].Devices, so); err != nil {
			return out, err
		}
		l.Info = l.Sessions[0].Info()
		runners := make([]batch.Runner, len(l.Sessions))
		for j, s := range l.Sessions {
			runners[j] = s
			if o.Wrap != nil {
				runners[j] = o.Wrap(s)
			}
		}
		var obs batch.Observer
		if o.Observer != nil {
			obs = o.Observer(m.Name)
		}
		if l.Batcher, err = NewBatcher(m, runners, obs, log.With("model", m.Name)); err != nil {
			return out, err
		}
	}
	return out, nil
}

// Close closes every session.
func (l Loaded) Close() {
	for _, m := range l {
		for _, s := range m.Sessions {
			s.Close()
		}
	}
}

// ConsumerModels returns the models as the consumer takes them.
func (l Loaded) ConsumerModels() []consumer.Model {
	out := make([]consumer.Model, len(l))
	for i, m := range l {
		out[i] = consumer.Model{Config: m.Config, Info: m.Info, Batcher: m.Batcher, MaxInFlight: m.Placement.MaxInFlight()}
	}
	return out
}

// Batchers returns the models' batchers, to run for the worker's life.
func (l Loaded) Batchers() []*batch.Batcher {
	out := make([]*batch.Batcher, len(l))
	for i, m := range l {
		out[i] = m.Batcher
	}
	return out
}

// Devices maps each model to its devices, for /v1/models.
func (l Loaded) Devices() map[string][]string {
	out := map[string][]string{}
	for _, m := range l {
		for _, d := range m.Placement.Devices {
			out[m.Config.Name] = append(out[m.Config.Name], d.String())
		}
	}
	return out
}
