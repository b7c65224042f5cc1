package runtime

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"

	"github.com/inferq/inferq/tensor"
	ort "github.com/yalue/onnxruntime_go"
)

// ErrClosed is returned by calls on a closed Env or Session.
var ErrClosed = errors.New("runtime: closed")

// ortProcess counts the users of the process's one onnxruntime environment.
// onnxruntime_go keeps the environment, the loaded library's handle and the
// library path in its own package variables (one environment per process,
// set up by InitializeEnvironment and torn down by DestroyEnvironment), so
// the reference count that decides when to call them has to be
// process-wide too. Signal actions, which loading the CUDA provider
// overwrites, are process-wide as well (see withSignalHandlersKept). This is
// the only package-level mutable state here.
var ortProcess struct {
	signals sync.Mutex // serialises CUDA provider loads
	mu      sync.Mutex
	refs    int    // Envs not yet closed + Sessions not yet closed
	path    string // library loaded while refs > 0
	version string
}

// Env is a handle on the process's onnxruntime environment. The first
// NewEnv loads the shared library and creates the environment; the
// environment is destroyed (and the library unloaded) when the last Env and
// the last Session made from any Env are closed, so tests may create and
// close several. All Envs of a process must name the same library.
//
// Env's methods are safe for concurrent use.
type Env struct {
	path    string
	version string
	logger  *slog.Logger

	mu     sync.Mutex
	closed bool
}

// NewEnv returns a handle on the onnxruntime environment, loading the
// library at libPath (see LocateLibrary) if no Env is open. logger may be
// nil. The caller must Close the Env.
func NewEnv(libPath string, logger *slog.Logger) (*Env, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if libPath == "" {
		return nil, fmt.Errorf("%w: empty library path; run `make setup` or pass --ort-lib", ErrLibraryNotFound)
	}
	abs, err := filepath.Abs(libPath)
	if err != nil {
		return nil, fmt.Errorf("runtime: onnxruntime library path %q: %w", libPath, err)
	}
	p := &ortProcess
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refs > 0 {
		if p.path != abs {
			return nil, fmt.Errorf("runtime: onnxruntime is already loaded from %q; this process cannot also load %q", p.path, abs)
		}
		p.refs++
		return &Env{path: abs, version: p.version, logger: logger}, nil
	}
	ort.SetSharedLibraryPath(abs)
	if err := ort.InitializeEnvironment(ort.WithLogLevelError()); err != nil {
		return nil, fmt.Errorf("runtime: load onnxruntime from %q: %w", abs, err)
	}
	p.refs, p.path, p.version = 1, abs, ort.GetVersion()
	logger.Info("onnxruntime loaded", "path", abs, "version", p.version)
	return &Env{path: abs, version: p.version, logger: logger}, nil
}

// Version returns the loaded onnxruntime version, such as "1.30.0".
func (e *Env) Version() string { return e.version }

// LibraryPath returns the absolute path of the loaded library.
func (e *Env) LibraryPath() string { return e.path }

// Close releases this handle. The environment itself is destroyed when no
// Env and no Session is left open. Close is idempotent.
func (e *Env) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	return releaseORT(e.logger)
}

// acquire takes a reference on the environment for a Session or a
// temporary inspection session; the caller must call releaseORT.
func (e *Env) acquire() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrClosed
	}
	p := &ortProcess
	p.mu.Lock()
	p.refs++ // refs > 0: this Env holds one
	p.mu.Unlock()
	return nil
}

func releaseORT(logger *slog.Logger) error {
	p := &ortProcess
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refs--
	if p.refs > 0 {
		return nil
	}
	path := p.path
	p.path, p.version = "", ""
	if err := ort.DestroyEnvironment(); err != nil {
		return fmt.Errorf("runtime: destroy onnxruntime environment: %w", err)
	}
	logger.Info("onnxruntime unloaded", "path", path)
	return nil
}

// Inspect loads the model file at path into a temporary session (graph
// optimisations off, so it is cheap) and returns its inputs and outputs.
// It is what `inferq models inspect` prints.
func (e *Env) Inspect(path string) (tensor.ModelInfo, error) {
	return e.inspect(path, nil)
}

// InspectData is Inspect for a model held in memory.
func (e *Env) InspectData(model []byte) (tensor.ModelInfo, error) {
	return e.inspect("", model)
}

func (e *Env) inspect(path string, data []byte) (tensor.ModelInfo, error) {
	what := path
	if path == "" {
		what = fmt.Sprintf("<%d bytes>", len(data))
	}
	if err := e.acquire(); err != nil {
		return tensor.ModelInfo{}, err
	}
	defer func() { _ = releaseORT(e.logger) }()
	var (
		in, out []ort.InputOutputInfo
		err     error
	)
	if path != "" {
		opts, oerr := ort.NewSessionOptions()
		if oerr != nil {
			return tensor.ModelInfo{}, fmt.Errorf("runtime: inspect %s: session options: %w", what, oerr)
		}
		defer func() { _ = opts.Destroy() }()
		if oerr := opts.SetGraphOptimizationLevel(ort.GraphOptimizationLevelDisableAll); oerr != nil {
			return tensor.ModelInfo{}, fmt.Errorf("runtime: inspect %s: session options: %w", what, oerr)
		}
		in, out, err = ort.GetInputOutputInfoWithOptions(path, opts)
	} else {
		in, out, err = ort.GetInputOutputInfoWithONNXData(data)
	}
	if err != nil {
		return tensor.ModelInfo{}, fmt.Errorf("runtime: inspect %s: %w", what, err)
	}
	return modelInfoFrom(in, out), nil
}
