package oip

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/inferq/inferq/admit"
	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
)

// The Open Inference Protocol (KServe v2, Triton's HTTP API) over HTTP:
//
//	GET  /v2                                  server metadata
//	GET  /v2/health/live, /v2/health/ready    200, or 400 while models warm up
//	GET  /v2/models/{m}[/versions/{v}]        model metadata
//	GET  /v2/models/{m}[/versions/{v}]/ready  200, or 400 while not ready
//	POST /v2/models/{m}[/versions/{v}]/infer  inference
//
// and Triton's configuration, statistics and repository index routes
// (tritonhttp.go).
//
// An infer request is {"id"?, "parameters"?, "inputs": [...], "outputs"?}
// with the tensors of DESIGN.md section 3, or with the binary tensor
// extension: the Inference-Header-Content-Length header gives the length of
// the JSON, the raw tensor bytes follow it (inputs carry "parameters":
// {"binary_data_size": n}). Outputs come back in the binary form when the
// request asks ("parameters": {"binary_data_output": true}, or
// "binary_data": true on an output). It runs through the model's batcher
// ahead of queued tasks, like a KubeMQ query. Errors are {"error": "..."}
// with Triton's status codes: 400 for a bad request, 404 for an unknown
// model or version, 413 for a body over limits.max_body_bytes, 500 for an
// inference failure, 503 when the model's batcher is closed, when
// HTTPConfig.MaxConcurrentInfer requests are in progress or the model has
// batching.max_queue_size requests waiting (then with Retry-After), when
// the bodies being read hold HTTPConfig.MaxBodyMemory (Retry-After), and
// when the request waited past batching.default_queue_timeout (also with
// Retry-After). A request takes its concurrency slot only once its body
// has arrived: a slow client holds a connection and the bytes it sent,
// never a slot. A "priority" parameter ("parameters": {"priority": n})
// picks the request's priority level, as kwargs.priority does for a task.

// HeaderInferenceLength is the binary tensor extension's header: the
// length of the JSON part of a request or response body.
const HeaderInferenceLength = task.HeaderInferenceLength

// initialBodyBuf caps the buffer an infer body starts with: the declared
// Content-Length is the client's word, so the buffer grows with what
// arrives beyond it.
const initialBodyBuf = 64 << 10

// v2 serves the /v2 routes.
type v2[M Model] struct {
	s      Server[M]
	obs    Observer
	gather prometheus.Gatherer // the metrics the statistics read; nil: none
	ready  func() bool
	// slots holds a token per infer request whose body has arrived and
	// that is being admitted or run: a body still arriving holds none.
	slots chan struct{}
	// mem is the bytes of infer bodies in memory, being read or held by
	// a request in progress: the bound that slots no longer give.
	mem bodyMemory
}

// bodyMemory counts the bytes of infer request bodies in memory against
// a bound. Bodies are read before a request takes a slot, so that a slow
// client holds no slot (issue 25 item 9); their number is then bounded
// only by the connections, and their memory by this count instead. A
// body's buffer follows the bytes that arrived, so a client trickling a
// large body holds little of it.
type bodyMemory struct {
	held  atomic.Int64
	limit int64
}

// take charges n bytes, or reports false when they would pass the bound.
// One request's charge (total) never counts beyond the whole bound, so
// that a body the model's limit allows is never refused on its own.
func (m *bodyMemory) take(n, total int64) bool {
	if total+n > m.limit {
		n = max(m.limit-total, 0)
	}
	if m.held.Add(n) > m.limit {
		m.held.Add(-n)
		return false
	}
	return true
}

func (m *bodyMemory) give(n int64) { m.held.Add(-n) }

func mountOIP[M Model](mux *http.ServeMux, s Server[M], c HTTPConfig) {
	n := c.MaxConcurrentInfer
	if n <= 0 {
		n = models.DefaultHTTPMaxConcurrentRequests
	}
	o := &v2[M]{s: s, obs: c.Metrics, gather: c.Gatherer, ready: c.Ready, slots: make(chan struct{}, n)}
	o.mem.limit = c.MaxBodyMemory
	if o.mem.limit <= 0 {
		o.mem.limit = int64(n) * models.DefaultMaxBodyBytes
	}
	if o.ready == nil {
		o.ready = func() bool { return true }
	}
	if o.obs == nil {
		o.obs = noObserver{}
	}
	mux.HandleFunc("GET /v2", o.metadata)
	mux.HandleFunc("GET /v2/health/live", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /v2/health/ready", o.health)
	for _, p := range []string{"/v2/models/{model}", "/v2/models/{model}/versions/{version}"} {
		mux.HandleFunc("GET "+p, o.modelMetadata)
		mux.HandleFunc("GET "+p+"/ready", o.modelReady)
		mux.HandleFunc("POST "+p+"/infer", o.infer)
		mux.HandleFunc("GET "+p+"/config", o.modelConfig)
		mux.HandleFunc("GET "+p+"/stats", o.modelStats)
	}
	mux.HandleFunc("GET /v2/models/stats", o.modelStats)
	if _, repo := c.Routes["POST /v2/repository/index"]; !repo {
		mux.HandleFunc("POST /v2/repository/index", o.repositoryIndex)
	}
}

func (o *v2[M]) metadata(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"name": "inferq", "version": serverVersion(), "extensions": []string{"binary_tensor_data"}})
}

// serverVersion is the server metadata's version: the module's, or "dev".
func serverVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "dev"
}

func (o *v2[M]) health(w http.ResponseWriter, r *http.Request) {
	if !o.ready() {
		// Triton answers 400 while not ready.
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// model returns the model the path names, or writes the 404.
func (o *v2[M]) model(w http.ResponseWriter, r *http.Request) (M, bool) {
	name := r.PathValue("model")
	m, err := o.s.Model(name)
	if err != nil {
		oipError(w, http.StatusNotFound, err)
		return m, false
	}
	if v := r.PathValue("version"); v != "" && v != m.Serving() {
		oipError(w, http.StatusNotFound, fmt.Errorf("model %q has no version %q (it serves version %q)", name, v, m.Serving()))
		return m, false
	}
	return m, true
}

func (o *v2[M]) modelMetadata(w http.ResponseWriter, r *http.Request) {
	m, ok := o.model(w, r)
	if !ok {
		return
	}
	info := m.ModelInfo()
	writeJSON(w, http.StatusOK, map[string]any{
		"name": m.ModelConfig().Name, "versions": []string{m.Serving()}, "platform": "onnxruntime_onnx",
		"inputs": tensorMetas(info.Inputs), "outputs": tensorMetas(info.Outputs),
	})
}

func (o *v2[M]) modelReady(w http.ResponseWriter, r *http.Request) {
	if _, ok := o.model(w, r); !ok {
		return
	}
	o.health(w, r)
}

func oipError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

// errBodyMemory refuses a body the memory bound has no room for.
var errBodyMemory = errors.New("no room for the request body")

// memoryError says why errBodyMemory: the bound and what is held.
func (o *v2[M]) memoryError() error {
	return fmt.Errorf("%w: infer request bodies in memory hold %d bytes of their bound of %d bytes (by default http.max_concurrent_requests x 64 MiB); retry later",
		errBodyMemory, o.mem.held.Load(), o.mem.limit)
}

func (o *v2[M]) infer(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	m, ok := o.model(w, r)
	if !ok {
		o.obs.ObserveInfer("http", "", outcomeUnknownModel, time.Since(start))
		return
	}
	// Every slot taken by requests whose bodies have arrived: refused at
	// once, before the body is read. Close rather than read the body to
	// reuse the connection: reading waits for a client that may send
	// nothing more.
	if len(o.slots) >= cap(o.slots) {
		w.Header().Set("Connection", "close")
		o.busy(w)
		return
	}
	cfg := m.ModelConfig()
	name := cfg.Name
	// The body first, holding no slot: a client that trickles its body
	// holds a connection and the bytes it sent, never a slot.
	body, charged, err := o.read(w, r, cfg)
	defer o.mem.give(charged)
	if errors.Is(err, errBodyMemory) {
		w.Header().Set("Connection", "close") // the body is not read
		w.Header().Set("Retry-After", "1")
		oipError(w, http.StatusServiceUnavailable, err)
		return
	}
	var res oipResult
	if err != nil {
		res = oipResult{code: http.StatusBadRequest, err: err, outcome: outcomeBadInput}
		if errors.Is(err, task.ErrTooLarge) {
			res.code = http.StatusRequestEntityTooLarge
			w.Header().Set("Connection", "close") // the body is not read
		}
	} else {
		// Then a slot, for admission and the run; without one the
		// request is refused, not queued.
		select {
		case o.slots <- struct{}{}:
		default:
			o.busy(w)
			return
		}
		res = o.run(r.Context(), name, body, r.Header, start)
		<-o.slots
	}
	o.obs.ObserveInfer("http", name, res.outcome, time.Since(start))
	if unavailable(res.outcome) {
		w.Header().Set("Retry-After", "1")
	}
	if res.code != http.StatusOK {
		oipError(w, res.code, res.err)
		return
	}
	if res.jsonLen < len(res.body) {
		w.Header().Set(HeaderInferenceLength, strconv.Itoa(res.jsonLen))
		w.Header().Set("Content-Type", "application/octet-stream")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(res.body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(res.body)
}

// busy answers 503 for a full concurrency cap.
func (o *v2[M]) busy(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "1")
	oipError(w, http.StatusServiceUnavailable, fmt.Errorf("%d infer requests are in progress, the limit (http.max_concurrent_requests); retry later", cap(o.slots)))
}

// read reads the request body within the body limit of the model
// configured c (the rule of every path: admit.CheckBody) and the memory
// bound, and returns the bytes it charged to the bound, which the caller
// gives back when the request ends, whatever the error. Memory follows
// the bytes that arrived, never the declared Content-Length: a client that
// declares 60 MB and sends a byte a second holds 64 KiB, until the
// server's read timeout ends it. errBodyMemory: the bound has no room.
func (o *v2[M]) read(w http.ResponseWriter, r *http.Request, c *models.Model) (body []byte, charged int64, err error) {
	limit := admit.BodyLimit(c)
	if r.ContentLength > limit {
		return nil, 0, admit.CheckBody(c, r.ContentLength)
	}
	size := int64(512)
	if r.ContentLength >= 0 {
		size = min(r.ContentLength+1, initialBodyBuf) // +1: room to see the end
	}
	if !o.mem.take(size, 0) {
		return nil, 0, o.memoryError()
	}
	charged = size
	buf := make([]byte, 0, size)
	src := http.MaxBytesReader(w, r.Body, limit)
	for {
		if len(buf) == cap(buf) {
			grow := min(2*int64(cap(buf)), limit+1) - int64(cap(buf))
			if grow <= 0 { // a byte past the limit has arrived
				return nil, charged, admit.CheckBody(c, -1)
			}
			if !o.mem.take(grow, charged) {
				return nil, charged, o.memoryError()
			}
			charged += grow
			buf = slices.Grow(buf, int(grow))
		}
		n, err := src.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case err == io.EOF:
			return buf, charged, nil
		case err != nil:
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				return nil, charged, admit.CheckBody(c, -1)
			}
			return nil, charged, fmt.Errorf("reading the request body: %w", err)
		}
	}
}

// oipResult is the answer to an infer request: a status code and the body
// (the JSON response, then binary outputs when jsonLen < len(body)), or an
// error.
type oipResult struct {
	code    int
	body    []byte
	jsonLen int
	err     error
	outcome string
}

// run admits and runs an infer request body for the model called name,
// received at start with header h: the answer is the JSON response, then
// binary outputs.
func (o *v2[M]) run(ctx context.Context, name string, body []byte, h http.Header, start time.Time) oipResult {
	var res oipResult
	in := admit.Input{From: admit.FromHTTP, Body: body, Trace: propagation.HeaderCarrier(h), HeaderLen: h.Get(HeaderInferenceLength),
		Model: name, Received: start, JSONOutputs: true}
	v, outcome, err := o.s.Infer(ctx, in, func(version string, outputs []tensor.Tensor, t *task.Task) error {
		resp := task.NewInferResponse(name, version, outputs, t)
		b := make([]byte, 0, 256)
		if t.ID != "" {
			q, _ := json.Marshal(t.ID)
			b = append(append(append(b, `{"id":`...), q...), ',')
		}
		js, bin, err := resp.Encode()
		if err != nil {
			return fmt.Errorf("model %q: encoding the result: %w", name, err)
		}
		if t.ID != "" {
			js = js[1:] // the response's own '{' is already there
		}
		b = append(b, js...)
		n := len(b)
		res.body, res.jsonLen = append(b, bin...), n
		return nil
	})
	if err != nil {
		return oipResult{code: inferStatus(v, outcome, err), err: err, outcome: outcome}
	}
	res.code, res.outcome = http.StatusOK, outcome
	return res
}

// inferStatus is the HTTP status of an infer request that failed with err
// (v its verdict, outcome its label), in Triton's terms; the gRPC endpoint
// maps it to a gRPC code (grpcCode).
func inferStatus(v admit.Verdict, outcome string, err error) int {
	switch {
	case v == admit.UnknownModel:
		return http.StatusNotFound
	case v != admit.Run, outcome == outcomeBadInput, outcome == outcomeExpired:
		return http.StatusBadRequest
	case errors.Is(err, batch.ErrClosed), unavailable(outcome):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
