package consumer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inferq/inferq/runtime"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
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
// model or version, 500 for an inference failure, 503 when the model's
// batcher is closed.

// HeaderInferenceLength is the binary tensor extension's header: the
// length of the JSON part of a request or response body.
const HeaderInferenceLength = "Inference-Header-Content-Length"

// oip serves the /v2 routes.
type oip struct {
	s      *Server
	ready  func() bool
	models map[string]*Model
	names  []string // sorted, quoted, for errors
}

func mountOIP(mux *http.ServeMux, c HTTPConfig) {
	o := &oip{s: c.Server, ready: c.Ready, models: map[string]*Model{}}
	if o.ready == nil {
		o.ready = func() bool { return true }
	}
	for i := range c.Server.cfg.Models {
		m := &c.Server.cfg.Models[i]
		o.models[m.Config.Name] = m
		o.names = append(o.names, strconv.Quote(m.Config.Name))
	}
	slices.Sort(o.names)
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
	version := "dev"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	writeJSON(w, http.StatusOK, map[string]any{"name": "inferq", "version": version, "extensions": []string{"binary_tensor_data"}})
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
	m := o.models[name]
	if m == nil {
		oipError(w, http.StatusNotFound, fmt.Errorf("unknown model %q: this server serves %s", name, strings.Join(o.names, ", ")))
		return nil
	}
	if v := r.PathValue("version"); v != "" && v != m.Version {
		oipError(w, http.StatusNotFound, fmt.Errorf("model %q has no version %q (it serves version %q)", name, v, m.Version))
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
		"name": m.Config.Name, "versions": []string{m.Version}, "platform": "onnxruntime_onnx",
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
	name := m.Config.Name
	sp := o.s.trace.http(r.Header, name, start)
	res := o.read(w, r, m)
	if res.code == 0 {
		res = o.s.oipInfer(r.Context(), m, res.body, r.Header.Get(HeaderInferenceLength), sp)
	}
	var err error
	if res.code != http.StatusOK {
		err = res.err
	}
	sp.end(res.outcome, err)
	o.s.met.HTTPInfer.WithLabelValues(name, res.outcome).Inc()
	o.s.met.SyncDuration.WithLabelValues(name, "http").Observe(time.Since(start).Seconds())
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

// read reads the request body within the model's body limit; code 0 means
// it was read into body.
func (o *oip) read(w http.ResponseWriter, r *http.Request, m *Model) oipResult {
	limit := int64(m.Config.Limits.MaxBodyBytes)
	if limit <= 0 {
		limit = task.DefaultMaxBodyBytes
	}
	if r.ContentLength > limit {
		return oipResult{code: http.StatusBadRequest, outcome: OutcomeBadInput,
			err: fmt.Errorf("model %q: request body of %d bytes is over the limit of %d bytes (limits.max_body_bytes)", m.Config.Name, r.ContentLength, limit)}
	}
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength))
	}
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit)); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			err = fmt.Errorf("model %q: request body over the limit of %d bytes (limits.max_body_bytes)", m.Config.Name, limit)
		} else {
			err = fmt.Errorf("reading the request body: %w", err)
		}
		return oipResult{code: http.StatusBadRequest, outcome: OutcomeBadInput, err: err}
	}
	return oipResult{body: buf.Bytes()}
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

// oipInfer runs an infer request body for m. headerLen is the
// Inference-Header-Content-Length header ("" for plain JSON). Safe for
// concurrent use.
func (s *Server) oipInfer(ctx context.Context, m *Model, body []byte, headerLen string, sp *span) oipResult {
	bad := func(err error) oipResult {
		return oipResult{code: http.StatusBadRequest, err: err, outcome: OutcomeBadInput}
	}
	lim := task.Limits{MaxBodyBytes: int64(m.Config.Limits.MaxBodyBytes), MaxTensorElements: m.Config.Limits.MaxTensorElements}
	inputs, req, err := parseInfer(body, headerLen, m.Info, lim)
	if err != nil {
		return bad(fmt.Errorf("model %q: %w", m.Config.Name, err))
	}
	item := runtime.Item{Inputs: inputs}
	for _, out := range req.outputs {
		item.Outputs = append(item.Outputs, out.name)
	}
	r := s.runSync(ctx, m, item, sp)
	if r.Err != nil {
		outcome, err := syncError(m.Config.Name, r.Err)
		code := http.StatusInternalServerError
		switch {
		case outcome == OutcomeBadInput, outcome == OutcomeExpired:
			code = http.StatusBadRequest
		case errors.Is(r.Err, runtime.ErrClosed):
			code = http.StatusServiceUnavailable
		}
		return oipResult{code: code, err: err, outcome: outcome}
	}
	resp := task.NewInferResponse(m.Config.Name, m.Version, r.Outputs, nil)
	for i := range resp.Outputs {
		resp.Outputs[i].Binary = req.binary(resp.Outputs[i].Name)
	}
	b := make([]byte, 0, 256)
	if req.id != "" {
		b = append(b, `{"id":`...)
		b, _ = appendJSONString(b, req.id)
		b = append(b, ',')
	}
	js, bin, err := resp.Encode()
	if err != nil {
		return oipResult{code: http.StatusInternalServerError, err: fmt.Errorf("model %q: encoding the result: %w", m.Config.Name, err), outcome: OutcomeFailure}
	}
	if req.id != "" {
		js = js[1:] // the response's own '{' is already there
	}
	b = append(b, js...)
	n := len(b)
	b = append(b, bin...)
	return oipResult{code: http.StatusOK, body: b, jsonLen: n, outcome: OutcomeSuccess}
}

func appendJSONString(b []byte, s string) ([]byte, error) {
	q, err := json.Marshal(s)
	return append(b, q...), err
}

// inferRequest is what inferq reads of an infer request besides its
// inputs.
type inferRequest struct {
	id        string
	outputs   []inferOutput
	binaryAll bool // parameters.binary_data_output
}

type inferOutput struct {
	name   string
	binary bool
}

func (r *inferRequest) binary(name string) bool {
	if r.binaryAll {
		return true
	}
	for _, o := range r.outputs {
		if o.name == name {
			return o.binary
		}
	}
	return false
}

// parseInfer reads an infer request body: the JSON, and with headerLen set
// (the binary tensor extension) the raw tensor data after it. The tensors
// are read by package task against the model, with every datatype,
// nested or flat data, and the shape and size checks of a task.
func parseInfer(body []byte, headerLen string, info tensor.ModelInfo, lim task.Limits) ([]tensor.Tensor, inferRequest, error) {
	var req inferRequest
	header, bin := body, []byte(nil)
	if headerLen = strings.TrimSpace(headerLen); headerLen != "" {
		n, err := strconv.Atoi(headerLen)
		if err != nil || n < 0 || n > len(body) {
			return nil, req, fmt.Errorf("%s %q does not fit a body of %d bytes", HeaderInferenceLength, headerLen, len(body))
		}
		header, bin = body[:n], body[n:]
	}
	members, err := jsonMembers(header)
	if err != nil {
		return nil, req, fmt.Errorf("request body: %w", err)
	}
	inputs := members["inputs"]
	if len(inputs) == 0 || inputs[0] != '[' {
		return nil, req, errors.New(`request body: "inputs": want an array of tensors {"name","shape","datatype","data"}`)
	}
	if raw := members["id"]; raw != nil {
		if err := json.Unmarshal(raw, &req.id); err != nil {
			return nil, req, errors.New(`request body: "id": want a string`)
		}
	}
	if raw := members["parameters"]; raw != nil && !bytes.Equal(raw, []byte("null")) {
		var p struct {
			BinaryDataOutput bool `json:"binary_data_output"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, req, fmt.Errorf(`request body: "parameters": want an object with binary_data_output true or false: %v`, err)
		}
		req.binaryAll = p.BinaryDataOutput
	}
	if raw := members["outputs"]; raw != nil && !bytes.Equal(raw, []byte("null")) {
		var outs []struct {
			Name       string `json:"name"`
			Parameters struct {
				BinaryData       bool `json:"binary_data"`
				BinaryDataOutput bool `json:"binary_data_output"`
			} `json:"parameters"`
		}
		if err := json.Unmarshal(raw, &outs); err != nil {
			return nil, req, fmt.Errorf(`request body: "outputs": want an array of {"name","parameters"}: %v`, err)
		}
		for _, o := range outs {
			if o.Name == "" {
				return nil, req, errors.New(`request body: "outputs": an output without a name`)
			}
			req.outputs = append(req.outputs, inferOutput{name: o.Name, binary: o.Parameters.BinaryData || o.Parameters.BinaryDataOutput})
		}
	}
	// The inputs, as kwargs.inputs of a query (binary data after it).
	const prefix = `{"task_name":"oip","kwargs":{"inputs":`
	wrapped := make([]byte, 0, len(prefix)+len(inputs)+2+len(bin))
	wrapped = append(append(append(wrapped, prefix...), inputs...), "}}"...)
	var tags map[string]string
	if bin != nil {
		tags = map[string]string{task.TagContentType: task.ContentTypeBinary, task.TagHeaderLength: strconv.Itoa(len(wrapped))}
		wrapped = append(wrapped, bin...)
	}
	t, err := task.ParseQuery(wrapped, tags, lim)
	if err != nil {
		return nil, req, cleanTaskError(err)
	}
	ts, err := t.Inputs(info, lim)
	if err != nil {
		return nil, req, cleanTaskError(err)
	}
	return ts, req, nil
}

// cleanTaskError drops what a task error says of the query it was wrapped
// in: the request has inputs, not kwargs.inputs.
func cleanTaskError(err error) error {
	return errors.New(strings.ReplaceAll(err.Error(), "kwargs.inputs", "inputs"))
}

// jsonMembers returns the raw values of the top-level members of the JSON
// object b, which must be all of b (leading and trailing white space
// aside). It only finds the values' bounds: their contents are checked by
// whoever decodes them.
func jsonMembers(b []byte) (map[string][]byte, error) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, errors.New("want a JSON object")
	}
	out := map[string][]byte{}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		i++
	} else {
		for {
			if i >= len(b) || b[i] != '"' {
				return nil, fmt.Errorf("offset %d: want a member name", i)
			}
			end, err := skipJSON(b, i)
			if err != nil {
				return nil, err
			}
			var key string
			if err := json.Unmarshal(b[i:end], &key); err != nil {
				return nil, fmt.Errorf("offset %d: member name: %v", i, err)
			}
			i = skipSpace(b, end)
			if i >= len(b) || b[i] != ':' {
				return nil, fmt.Errorf("offset %d: want ':'", i)
			}
			i = skipSpace(b, i+1)
			end, err = skipJSON(b, i)
			if err != nil {
				return nil, err
			}
			if _, dup := out[key]; dup {
				return nil, fmt.Errorf("member %q given twice", key)
			}
			out[key] = b[i:end:end]
			i = skipSpace(b, end)
			if i < len(b) && b[i] == ',' {
				i = skipSpace(b, i+1)
				continue
			}
			if i < len(b) && b[i] == '}' {
				i++
				break
			}
			return nil, fmt.Errorf("offset %d: want ',' or '}'", i)
		}
	}
	if i = skipSpace(b, i); i != len(b) {
		return nil, fmt.Errorf("offset %d: data after the JSON object", i)
	}
	return out, nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipJSON returns the end of the JSON value at b[i]: a string, an object
// or array (brackets matched, strings skipped), or a scalar (up to the next
// delimiter). It does not validate what it skips.
func skipJSON(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errors.New("unexpected end of JSON")
	}
	switch b[i] {
	case '"':
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1, nil
			}
		}
		return 0, errors.New("unterminated string")
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			case '"':
				end, err := skipJSON(b, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			}
		}
		return 0, errors.New("unterminated object or array")
	}
	j := i
	for j < len(b) {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r', ':':
			if j == i {
				return 0, fmt.Errorf("offset %d: want a value", i)
			}
			return j, nil
		}
		j++
	}
	return j, nil
}
