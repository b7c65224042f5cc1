package repository

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/tensor"
)

// Model states in Index, Triton's names.
const (
	StateReady       = "READY"
	StateUnavailable = "UNAVAILABLE"
	StateLoading     = "LOADING"
)

// Loader builds and warms one version of a model (m.Path is its file):
// the Instance takes traffic as soon as it returns.
type Loader func(ctx context.Context, m models.Model) (*Instance, error)

// Registrar is the consumer side of models that come and go: AddModel
// starts a model's queue consumer, query subscription and metrics;
// RemoveModel stops them once what was taken finished (the rest stays on
// the broker). *consumer.Server satisfies it.
type Registrar interface {
	AddModel(m consumer.Model) error
	RemoveModel(ctx context.Context, name string) error
}

// Config configures a Repository.
type Config struct {
	// Dir is the repository (model_repository).
	Dir string
	// Mode is model_control_mode; "" is none.
	Mode models.ControlMode
	// Poll is how often poll mode rescans (default
	// models.DefaultRepositoryPoll).
	Poll time.Duration
	// Static names the models of the config's models: list: a repository
	// model of one of these names is a configuration error.
	Static []string
	// Load builds a version. Required.
	Load   Loader
	Logger *slog.Logger
}

// Repository serves the models of a model repository. Build it with
// Open, give its Models to the consumer, Attach the consumer, and Run it
// for as long as the consumer may enqueue (the batchers run in Run). Safe
// for concurrent use.
type Repository struct {
	cfg Config
	log *slog.Logger

	op sync.Mutex // one scan, load or unload at a time

	mu       sync.Mutex // guards what follows
	models   map[string]*model
	reg      Registrar
	runCtx   context.Context // set while Run runs
	retiring sync.WaitGroup
	batchers sync.WaitGroup
}

// model is one repository model's state.
type model struct {
	name string
	// cfg is the consumer's view (settings, signature), from its first
	// load; registered says the consumer has it.
	cfg        models.Model
	info       tensor.ModelInfo
	registered bool
	sw         *Switch
	loaded     map[int64]*served
	failed     map[int64]failure
	loading    map[int64]bool
	reason     string // why the model as a whole cannot load (config.yaml), or was removed
}

// failure is a version's failed load, not retried until its file or the
// config changes.
type failure struct {
	stamp  Stamp
	cfgSum string
	reason string
}

// Open scans cfg.Dir and loads every model's selected versions (in every
// mode: explicit mode then loads and unloads on request only). A model that
// fails to load is left out and listed by Index with why; Open fails only
// when the repository cannot be read or a model is also in models:.
func Open(ctx context.Context, cfg Config) (*Repository, error) {
	if cfg.Load == nil {
		return nil, errors.New("repository: no loader")
	}
	if cfg.Mode == "" {
		cfg.Mode = models.ControlNone
	}
	if cfg.Poll <= 0 {
		cfg.Poll = models.DefaultRepositoryPoll.D()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Repository{cfg: cfg, log: cfg.Logger, models: map[string]*model{}}
	entries, err := Scan(cfg.Dir)
	if err != nil {
		return nil, err
	}
	for _, name := range sortedKeys(entries) {
		if slices.Contains(cfg.Static, name) {
			return nil, fmt.Errorf("model %q is in models: and in model_repository %s; name it once", name, cfg.Dir)
		}
	}
	r.op.Lock()
	defer r.op.Unlock()
	for _, name := range sortedKeys(entries) {
		r.sync(ctx, name, entries[name])
	}
	return r, nil
}

// Models are the models loaded, as the consumer takes them, by name.
func (r *Repository) Models() []consumer.Model {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []consumer.Model
	for _, name := range sortedKeys(r.models) {
		m := r.models[name]
		if cm, ok := m.consumerModel(); ok {
			m.registered = true
			out = append(out, cm)
		}
	}
	return out
}

// Devices maps each loaded model to its serving version's devices.
func (r *Repository) Devices() map[string][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]string{}
	for name, m := range r.models {
		if v := m.highest(); v != nil {
			out[name] = v.inst.Devices
		}
	}
	return out
}

// consumerModel is m as the consumer takes it, with its highest loaded
// version's signature; false when none is loaded.
func (m *model) consumerModel() (consumer.Model, bool) {
	v := m.highest()
	if v == nil {
		return consumer.Model{}, false
	}
	m.info = v.inst.Info
	return consumer.Model{Config: m.cfg, Info: v.inst.Info, Batcher: m.sw, Version: v.version, MaxInFlight: v.inst.MaxInFlight}, true
}

func (m *model) highest() *served { return highestOf(m.loaded) }

func highestOf(loaded map[int64]*served) *served {
	var h *served
	for _, v := range loaded {
		if h == nil || v.n > h.n {
			h = v
		}
	}
	return h
}

// Attach gives the repository the consumer that serves its models: from
// now on models added to the repository are added to it, and removed ones
// removed.
func (r *Repository) Attach(reg Registrar) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reg = reg
}

// Run runs the loaded versions' batchers and, in poll mode, rescans the
// repository every Poll, until ctx ends; then it stops every batcher
// softly (each runs what it accepted) and closes the sessions. Run it
// until the consumer has drained.
func (r *Repository) Run(ctx context.Context) error {
	r.mu.Lock()
	r.runCtx = ctx
	for _, m := range r.models {
		for _, v := range m.loaded {
			r.start(v)
		}
	}
	r.mu.Unlock()
	if r.cfg.Mode == models.ControlPoll {
		r.log.Info("model repository: polling", "dir", r.cfg.Dir, "every", r.cfg.Poll)
		t := time.NewTicker(r.cfg.Poll)
		defer t.Stop()
	loop:
		for {
			select {
			case <-ctx.Done():
				break loop
			case <-t.C:
				r.Poll(ctx)
			}
		}
	}
	<-ctx.Done()
	r.op.Lock() // no load in progress from here
	defer r.op.Unlock()
	r.retiring.Wait()
	r.batchers.Wait() // each Run ended with ctx
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.models {
		for _, v := range m.loaded {
			closeInstance(v.inst)
		}
		m.loaded = map[int64]*served{}
	}
	return nil
}

// Close closes the sessions of a repository whose Run never ran (Run
// closes them itself when it returns).
func (r *Repository) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runCtx != nil {
		return
	}
	for _, m := range r.models {
		for _, v := range m.loaded {
			closeInstance(v.inst)
		}
		m.loaded = map[int64]*served{}
	}
}

// start runs v's batcher until Run's ctx ends or v is retired. Called
// with mu held; before Run, Run starts it.
func (r *Repository) start(v *served) {
	if r.runCtx == nil || v.stop != nil {
		return
	}
	ctx, cancel := context.WithCancel(r.runCtx)
	v.stop = cancel
	r.batchers.Add(1)
	go func() {
		defer r.batchers.Done()
		defer close(v.done)
		if err := v.inst.Batcher.Run(ctx); err != nil {
			r.log.Error("model repository: batcher", "version", v.version, "err", err)
		}
	}()
}

// Poll rescans the repository and loads, reloads and unloads what
// changed: a model file's size or time, config.yaml's content, a version
// or model added or removed.
func (r *Repository) Poll(ctx context.Context) {
	entries, err := Scan(r.cfg.Dir)
	if err != nil {
		r.log.Error("model repository: scan failed; serving what is loaded", "err", err)
		return
	}
	r.op.Lock()
	defer r.op.Unlock()
	r.mu.Lock()
	names := sortedKeys(r.models)
	r.mu.Unlock()
	for _, name := range sortedKeys(entries) {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	for _, name := range names {
		if ctx.Err() != nil {
			return
		}
		e := entries[name]
		if e != nil && slices.Contains(r.cfg.Static, name) {
			r.setReason(name, fmt.Sprintf("also in models:; the repository's %s is not loaded", name))
			continue
		}
		r.sync(ctx, name, e)
	}
}

// Load loads (or reloads what changed of) the model called name from the
// repository, and returns why when its highest selected version is not
// serving afterwards. Only in explicit mode (else ErrNotExplicit); a
// model the repository lacks is ErrNotFound. Safe to call from any front
// end (HTTP here; gRPC's RepositoryModelLoad).
func (r *Repository) Load(ctx context.Context, name string) error {
	if err := r.explicit("load"); err != nil {
		return err
	}
	if slices.Contains(r.cfg.Static, name) {
		return fmt.Errorf("model %q is configured in models:, not in the repository", name)
	}
	dir := filepath.Join(r.cfg.Dir, name)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || name == "" || name[0] == '.' || filepath.Base(name) != name {
		return fmt.Errorf("%w: no model %q in the repository %s", ErrNotFound, name, r.cfg.Dir)
	}
	r.op.Lock()
	defer r.op.Unlock()
	e := scanModel(dir, name)
	r.sync(ctx, name, e)
	if e.Err != nil {
		return e.Err
	}
	sel := e.Selected()
	if len(sel) == 0 {
		return fmt.Errorf("model %q: the version policy selects none of its versions", name)
	}
	top := sel[len(sel)-1]
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.models[name]
	if f, ok := m.failed[top.N]; ok {
		return fmt.Errorf("model %q version %d: %s", name, top.N, f.reason)
	}
	if m.reason != "" {
		return errors.New(m.reason)
	}
	return nil
}

// Unload stops serving the model called name: its queue consumer stops
// after what it took finished (the rest stays on the broker), then its
// versions are unloaded. Only in explicit mode (else ErrNotExplicit); a
// model not loaded is ErrNotFound.
func (r *Repository) Unload(ctx context.Context, name string) error {
	if err := r.explicit("unload"); err != nil {
		return err
	}
	r.op.Lock()
	defer r.op.Unlock()
	r.mu.Lock()
	_, known := r.models[name]
	r.mu.Unlock()
	if !known {
		return fmt.Errorf("%w: model %q is not loaded", ErrNotFound, name)
	}
	r.sync(ctx, name, nil)
	r.mu.Lock()
	defer r.mu.Unlock()
	if m := r.models[name]; m != nil && len(m.loaded) > 0 {
		return errors.New(m.reason)
	}
	return nil
}

// ErrNotFound is Load's and Unload's error for a model the repository
// does not have.
var ErrNotFound = errors.New("not found")

// ErrNotExplicit is Load's and Unload's error outside explicit mode
// (Triton's rule: in poll and none mode the repository's content
// decides).
var ErrNotExplicit = errors.New("explicit model control is not enabled")

// Mode is the model control mode.
func (r *Repository) Mode() models.ControlMode { return r.cfg.Mode }

func (r *Repository) explicit(verb string) error {
	if r.cfg.Mode != models.ControlExplicit {
		return fmt.Errorf("%w: model %s needs model_control_mode explicit (it is %s)", ErrNotExplicit, verb, r.cfg.Mode)
	}
	return nil
}

func (r *Repository) setReason(name, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m := r.models[name]; m != nil {
		m.reason = reason
	}
}

// sync brings the model called name to what e (nil: removed) says: it
// loads the selected versions that are new or changed, switches the
// serving version to the highest loaded, and retires the versions
// replaced or no longer selected. A failed load keeps what serves. Called
// with op held.
func (r *Repository) sync(ctx context.Context, name string, e *Entry) {
	r.mu.Lock()
	m := r.models[name]
	if m == nil {
		if e == nil {
			r.mu.Unlock()
			return
		}
		m = &model{name: name, sw: &Switch{}, loaded: map[int64]*served{}, failed: map[int64]failure{}, loading: map[int64]bool{}}
		r.models[name] = m
	}
	r.mu.Unlock()
	if e == nil {
		r.remove(ctx, m)
		return
	}
	if e.Err != nil {
		r.mu.Lock()
		m.reason = e.Err.Error()
		r.mu.Unlock()
		r.log.Error("model repository: model not loadable; serving what is loaded", "model", name, "err", e.Err)
		return
	}
	fresh := r.loadChanged(ctx, m, e)
	r.install(ctx, m, e, fresh)
}

// loadChanged loads the selected versions that are not loaded as they
// are now on disk, and returns them by version.
func (r *Repository) loadChanged(ctx context.Context, m *model, e *Entry) map[int64]*served {
	fresh := map[int64]*served{}
	for _, v := range e.Selected() {
		r.mu.Lock()
		old, f := m.loaded[v.N], m.failed[v.N]
		same := old != nil && old.stamp == v.Stamp && old.cfgSum == e.ConfigSum
		failedBefore := f.reason != "" && f.stamp == v.Stamp && f.cfgSum == e.ConfigSum
		if !same && !failedBefore {
			m.loading[v.N] = true
		}
		r.mu.Unlock()
		if same || failedBefore {
			continue
		}
		s, err := r.loadVersion(ctx, m, e, v)
		r.mu.Lock()
		delete(m.loading, v.N)
		if err != nil {
			m.failed[v.N] = failure{stamp: v.Stamp, cfgSum: e.ConfigSum, reason: err.Error()}
		} else {
			delete(m.failed, v.N)
			fresh[v.N] = s
		}
		r.mu.Unlock()
		if err != nil {
			r.log.Error("model repository: load failed; serving what is loaded", "model", m.name, "version", v.N, "err", err)
		}
	}
	return fresh
}

func (r *Repository) loadVersion(ctx context.Context, m *model, e *Entry, v Version) (_ *served, err error) {
	// A load that panics (a loader bug, a config the checks let through)
	// fails this version, which shows UNAVAILABLE with the reason; it
	// must not take the serving process down, nor leave it LOADING.
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("model repository: loading a version panicked", "model", m.name, "version", v.N, "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("loading it failed: internal error: %v", p)
		}
	}()
	start := time.Now()
	mc := e.Model
	mc.Path = v.Path
	inst, err := r.cfg.Load(ctx, mc)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	registered, info, canSwap := m.registered, m.info, r.reg != nil
	r.mu.Unlock()
	if registered && !canSwap && !sameSignature(info, inst.Info) {
		closeInstance(inst)
		return nil, fmt.Errorf("its inputs or outputs differ from those of the version being served (%s); unload the model and load it again", describe(info))
	}
	r.log.Info("model repository: version loaded and warm", "model", m.name, "version", v.N, "took", time.Since(start).Round(time.Millisecond))
	return newServed(v.N, inst, v.Stamp, e.ConfigSum), nil
}

// install makes fresh part of m's loaded versions, drops the versions no
// longer selected (only when a selected one is loaded: a failed load
// keeps what served), switches the Switch to the highest loaded version
// and retires the versions that left.
//
// When the new serving version has other inputs or outputs, or
// config.yaml changed what the consumer holds (queue, retries, limits,
// result settings), the model leaves the consumer first (its queue
// drains on the old version; what waits stays on the broker) and comes
// back with the new version and settings: no task admitted for one
// signature runs on another.
func (r *Repository) install(ctx context.Context, m *model, e *Entry, fresh map[int64]*served) {
	r.mu.Lock()
	before := m.loaded
	next := map[int64]*served{}
	for _, v := range e.Selected() {
		if s := fresh[v.N]; s != nil {
			next[v.N] = s
		} else if s := before[v.N]; s != nil {
			next[v.N] = s
		}
	}
	if len(next) == 0 {
		next = before // nothing selected loads: keep serving what did
	}
	top := highestOf(next)
	rereg := m.registered && r.reg != nil && top != nil &&
		(!sameSignature(m.info, top.inst.Info) || !sameConsumerConfig(m.cfg, e.Model))
	reg := r.reg
	r.mu.Unlock()
	if rereg {
		r.log.Info("model repository: signature or consumer settings changed; the model's queue stops and starts again", "model", m.name)
		if err := reg.RemoveModel(ctx, m.name); err != nil {
			r.log.Error("model repository: stopping the model's consumer failed; the old version keeps serving", "model", m.name, "err", err)
			r.setReason(m.name, "reload: "+err.Error())
			for n, s := range next {
				if before[n] != s {
					r.retire(m.name, s)
				}
			}
			return
		}
		r.mu.Lock()
		m.registered = false
		r.mu.Unlock()
	}
	r.mu.Lock()
	m.loaded = next
	if m.cfg.Name == "" || !m.registered {
		m.cfg = e.Model
	}
	m.reason = ""
	for _, s := range next {
		r.start(s)
	}
	old := m.sw.set(top)
	add := !m.registered && top != nil && r.reg != nil
	cm, _ := m.consumerModel()
	if add {
		m.registered = true
	}
	reg = r.reg
	r.mu.Unlock()
	if old != top && top != nil {
		r.log.Info("model repository: serving version", "model", m.name, "version", top.version)
	}
	if add {
		if err := reg.AddModel(cm); err != nil {
			r.log.Error("model repository: consumer refused the model", "model", m.name, "err", err)
			r.mu.Lock()
			m.registered, m.reason = false, "consumer: "+err.Error()
			r.mu.Unlock()
		}
	}
	for n, s := range before {
		if next[n] != s {
			r.retire(m.name, s)
		}
	}
}

// remove stops m's consumer and unloads its versions.
func (r *Repository) remove(ctx context.Context, m *model) {
	r.mu.Lock()
	reg, registered := r.reg, m.registered
	r.mu.Unlock()
	if registered {
		if reg == nil {
			r.setReason(m.name, "removed from the repository, but this process cannot stop its consumer: it keeps serving until restart")
			return
		}
		if err := reg.RemoveModel(ctx, m.name); err != nil {
			r.setReason(m.name, "unload: "+err.Error())
			r.log.Error("model repository: stopping the model's consumer failed; it keeps serving", "model", m.name, "err", err)
			return
		}
	}
	r.mu.Lock()
	before := m.loaded
	m.loaded = map[int64]*served{}
	m.registered = false
	m.sw.set(nil)
	delete(r.models, m.name)
	r.mu.Unlock()
	for _, s := range before {
		r.retire(m.name, s)
	}
	r.log.Info("model repository: model unloaded", "model", m.name)
}

// retire waits, in the background, until s finished every request it
// accepted, then stops its batcher and closes its sessions.
func (r *Repository) retire(name string, s *served) {
	r.retiring.Add(1)
	go func() {
		defer r.retiring.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for s.pending.Load() > 0 {
			<-t.C
		}
		r.mu.Lock()
		stop := s.stop
		r.mu.Unlock()
		if stop != nil {
			stop()
			<-s.done
		}
		closeInstance(s.inst)
		r.log.Info("model repository: version unloaded", "model", name, "version", s.version)
	}()
}

func closeInstance(inst *Instance) {
	if inst.Close != nil {
		inst.Close()
	}
}

// IndexEntry is one model version in Index, Triton's repository index
// fields.
type IndexEntry struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	State   string `json:"state,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// Index lists the repository's models and versions with their state:
// READY (loaded; the highest serves), LOADING, UNAVAILABLE with why (a
// failed load, a bad config.yaml, or not loaded). With readyOnly, only
// the READY ones.
func (r *Repository) Index(readyOnly bool) []IndexEntry {
	entries, _ := Scan(r.cfg.Dir)
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []IndexEntry
	seen := map[string]bool{}
	for _, name := range sortedKeys(r.models) {
		m := r.models[name]
		seen[name] = true
		vs := map[int64]IndexEntry{}
		for n, f := range m.failed {
			vs[n] = IndexEntry{Name: name, Version: strconv.FormatInt(n, 10), State: StateUnavailable, Reason: f.reason}
		}
		for n := range m.loading {
			vs[n] = IndexEntry{Name: name, Version: strconv.FormatInt(n, 10), State: StateLoading}
		}
		for n, s := range m.loaded {
			vs[n] = IndexEntry{Name: name, Version: s.version, State: StateReady, Reason: m.reason}
		}
		if len(vs) == 0 {
			out = append(out, IndexEntry{Name: name, State: StateUnavailable, Reason: m.reason})
		}
		for _, n := range sortedKeys(vs) {
			out = append(out, vs[n])
		}
	}
	for _, name := range sortedKeys(entries) {
		if !seen[name] {
			reason := "unloaded"
			if e := entries[name]; e.Err != nil {
				reason = e.Err.Error()
			}
			out = append(out, IndexEntry{Name: name, State: StateUnavailable, Reason: reason})
		}
	}
	if readyOnly {
		out = slices.DeleteFunc(out, func(e IndexEntry) bool { return e.State != StateReady })
	}
	return out
}

// sameConsumerConfig reports whether a and b agree on what the consumer
// holds: everything but the settings of the sessions and the batcher,
// which a new version brings with it.
func sameConsumerConfig(a, b models.Model) bool {
	clear := func(m models.Model) models.Model {
		m.Path, m.Device, m.Instances, m.Concurrency, m.IntraOpThreads = "", models.Device{}, 0, 0, 0
		m.Batching, m.CUDA = models.Batching{}, models.CUDA{}
		return m
	}
	return reflect.DeepEqual(clear(a), clear(b))
}

func sameSignature(a, b tensor.ModelInfo) bool {
	eq := func(x, y []tensor.TensorInfo) bool {
		return slices.EqualFunc(x, y, func(p, q tensor.TensorInfo) bool {
			return p.Name == q.Name && p.DType == q.DType && slices.Equal(p.Dims, q.Dims)
		})
	}
	return eq(a.Inputs, b.Inputs) && eq(a.Outputs, b.Outputs)
}

func describe(info tensor.ModelInfo) string {
	s := ""
	for _, t := range info.Inputs {
		s += fmt.Sprintf("in %s %s %v; ", t.Name, t.Datatype(), t.Dims)
	}
	for _, t := range info.Outputs {
		s += fmt.Sprintf("out %s %s %v; ", t.Name, t.Datatype(), t.Dims)
	}
	return s
}

func sortedKeys[K string | int64, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
