package consumer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/inferq/inferq/admit"
	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/task"
)

// The Open Inference Protocol (KServe v2, Triton's HTTP API) over HTTP:
//
//	GET  /v2                                  server metadata
//	GET  /v2/health/live, /v2/health/ready    200, or 400 while models warm up
//	GET  /v2/models/{m}[/versions/{v}]        model metadata
//	GET  /v2/models/{m}[/versions/{v}]/ready  200, or 400 while not ready
//	POST /v2/models/{m}[/versions/{v}]/infer  inference
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
// batching.max_queue_size requests waiting (then with Retry-After), and
// when the request waited past batching.default_queue_timeout (also with
// Retry-After). A "priority" parameter ("parameters": {"priority": n})
// picks the request's priority level, as kwargs.priority does for a task.

// HeaderInferenceLength is the binary tensor extension's header: the
// length of the JSON part of a request or response body.
const HeaderInferenceLength = "Inference-Header-Content-Length"

// initialBodyBuf caps the buffer an infer body starts with: the declared
// Content-Length is the client's word, so the buffer grows with what
// arrives beyond it.
const initialBodyBuf = 64 << 10

// oip serves the /v2 routes.
type oip struct {
	s     *Server
	ready func() bool
	// slots holds a token per infer request in progress.
	slots chan struct{}
}

func mountOIP(mux *http.ServeMux, c HTTPConfig) {
	n := c.MaxConcurrentInfer
	if n <= 0 {
		n = models.DefaultHTTPMaxConcurrentRequests
	}
	o := &oip{s: c.Server, ready: c.Ready, slots: make(chan struct{}, n)}
	if o.ready == nil {
		o.ready = func() bool { return true }
	}
	mux.HandleFunc("GET /v2", o.metadata)
	mux.HandleFunc("GET /v2/health/live", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /v2/health/ready", o.health)
	for _, p := range []string{"/v2/models/{model}", "/v2/models/{model}/versions/{version}"} {
		mux.HandleFunc("GET "+p, o.modelMetadata)
		mux.HandleFunc("GET "+p+"/ready", o.modelReady)
		mux.HandleFunc("POST "+p+"/infer", o.infer)
	}
}

func (o *oip) metadata(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"name": "inferq", "version": serverVersion(), "extensions": []string{"binary_tensor_data"}})
}

// serverVersion is the server metadata's version: the module's, or "dev".
func serverVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "dev"
}

func (o *oip) health(w http.ResponseWriter, r *http.Request) {
	if !o.ready() {
		// Triton answers 400 while not ready.
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// model returns the model the path names, or writes the 404.
func (o *oip) model(w http.ResponseWriter, r *http.Request) *Model {
	name := r.PathValue("model")
	mt := o.s.models.Load()
	m, ok := mt.Model(name)
	if !ok {
		oipError(w, http.StatusNotFound, mt.Unknown(name))
		return nil
	}
	if v := r.PathValue("version"); v != "" && v != m.Serving() {
		oipError(w, http.StatusNotFound, fmt.Errorf("model %q has no version %q (it serves version %q)", name, v, m.Serving()))
		return nil
	}
	return m
}

func (o *oip) modelMetadata(w http.ResponseWriter, r *http.Request) {
	m := o.model(w, r)
	if m == nil {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"name": m.Config.Name, "versions": []string{m.Serving()}, "platform": "onnxruntime_onnx",
		"inputs": tensorMetas(m.Info.Inputs), "outputs": tensorMetas(m.Info.Outputs),
	})
}

func (o *oip) modelReady(w http.ResponseWriter, r *http.Request) {
	if o.model(w, r) == nil {
		return
	}
	o.health(w, r)
}

func oipError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

func (o *oip) infer(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	m := o.model(w, r)
	if m == nil {
		o.s.met.HTTPInfer.WithLabelValues("", OutcomeUnknownModel).Inc()
		return
	}
	// A slot before the body is read: the cap bounds the bodies in memory
	// too. Without one the request is refused at once, not queued.
	select {
	case o.slots <- struct{}{}:
		defer func() { <-o.slots }()
	default:
		w.Header().Set("Retry-After", "1")
		// Close rather than read the body to reuse the connection:
		// reading waits for a client that may send nothing more.
		w.Header().Set("Connection", "close")
		oipError(w, http.StatusServiceUnavailable, fmt.Errorf("%d infer requests are in progress, the limit (http.max_concurrent_requests); retry later", cap(o.slots)))
		return
	}
	name := m.Config.Name
	var res oipResult
	if body, err := o.read(w, r, m); err != nil {
		res = oipResult{code: http.StatusBadRequest, err: err, outcome: OutcomeBadInput}
		if errors.Is(err, task.ErrTooLarge) {
			res.code = http.StatusRequestEntityTooLarge
			w.Header().Set("Connection", "close") // the body is not read
		}
	} else {
		res = o.s.oipInfer(r.Context(), m, body, r.Header, start)
	}
	o.s.met.HTTPInfer.WithLabelValues(name, res.outcome).Inc()
	o.s.met.inference(name, res.outcome)
	o.s.met.SyncDuration.WithLabelValues(name, "http").Observe(time.Since(start).Seconds())
	if Unavailable(res.err) {
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

// read reads the request body within the model's body limit (the rule of
// every path: checkBody). Memory follows the bytes that arrived, never the
// declared Content-Length: a client that declares 60 MB and sends a byte a
// second holds 64 KiB, until the server's read timeout ends it.
func (o *oip) read(w http.ResponseWriter, r *http.Request, m *Model) ([]byte, error) {
	limit := admit.BodyLimit(&m.Config)
	if r.ContentLength > limit {
		return nil, admit.CheckBody(&m.Config, r.ContentLength)
	}
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(min(r.ContentLength, initialBodyBuf)))
	}
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit)); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, admit.CheckBody(&m.Config, -1)
		}
		return nil, fmt.Errorf("reading the request body: %w", err)
	}
	return buf.Bytes(), nil
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

// oipInfer admits and runs an infer request body for m, received at
// start with header h. Safe for concurrent use.
func (s *Server) oipInfer(ctx context.Context, m *Model, body []byte, h http.Header, start time.Time) oipResult {
	a := s.models.Load().Admit(admit.Input{From: admit.FromHTTP, Body: body, Tags: s.trace.traceHeaders(h), HeaderLen: h.Get(HeaderInferenceLength),
		Model: m.Config.Name, Received: start, Traced: s.trace.tr != nil})
	root := s.trace.httpRoot(m.Config.Name, &a, start)
	res := s.oipRun(ctx, &a, root)
	var err error
	if res.code != http.StatusOK {
		err = res.err
	}
	endRoot(root, res.outcome, err)
	return res
}

func (s *Server) oipRun(ctx context.Context, a *admitted, root context.Context) oipResult {
	outputs, ran, outcome, err := s.runSync(ctx, a, root)
	if err != nil {
		return oipResult{code: inferStatus(a, outcome, err), err: err, outcome: outcome}
	}
	m := a.Model
	resp := task.NewInferResponse(m.Config.Name, m.version(ran), outputs, a.Task)
	b := make([]byte, 0, 256)
	if a.Task.ID != "" {
		q, _ := json.Marshal(a.Task.ID)
		b = append(append(append(b, `{"id":`...), q...), ',')
	}
	js, bin, err := resp.Encode()
	if err != nil {
		return oipResult{code: http.StatusInternalServerError, err: fmt.Errorf("model %q: encoding the result: %w", m.Config.Name, err), outcome: OutcomeFailure}
	}
	if a.Task.ID != "" {
		js = js[1:] // the response's own '{' is already there
	}
	b = append(b, js...)
	n := len(b)
	b = append(b, bin...)
	return oipResult{code: http.StatusOK, body: b, jsonLen: n, outcome: OutcomeSuccess}
}

// inferStatus is the HTTP status of a sync infer request that failed with
// err (outcome its label), in Triton's terms; the gRPC endpoint maps it to
// a gRPC code (grpcCode).
func inferStatus(a *admitted, outcome string, err error) int {
	switch {
	case a.Verdict == admit.UnknownModel:
		return http.StatusNotFound
	case a.Verdict != admit.Run, outcome == OutcomeBadInput, outcome == OutcomeExpired:
		return http.StatusBadRequest
	case errors.Is(err, batch.ErrClosed), Unavailable(err):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
