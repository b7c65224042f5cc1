package repository

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// maxControlBody bounds a repository request's body (a few flags).
const maxControlBody = 64 << 10

// Routes are Triton's HTTP model repository extension, by mux pattern
// (worker.Config.Routes mounts them behind the bearer token):
//
//	POST /v2/repository/index                 every model and version with its state and reason; {"ready": true} lists the READY ones only
//	POST /v2/repository/models/{model}/load   load or reload (explicit mode)
//	POST /v2/repository/models/{model}/unload unload (explicit mode)
//
// The index answers in every mode; load and unload only in explicit mode
// (Triton's rule: in poll mode the repository's content decides).
func Routes(r *Repository) map[string]http.Handler {
	return map[string]http.Handler{
		"POST /v2/repository/index":                 http.HandlerFunc(r.serveIndex),
		"POST /v2/repository/models/{model}/load":   http.HandlerFunc(r.serveLoad),
		"POST /v2/repository/models/{model}/unload": http.HandlerFunc(r.serveUnload),
	}
}

func (r *Repository) serveIndex(w http.ResponseWriter, req *http.Request) {
	var body struct {
		Ready bool `json:"ready"`
	}
	if err := readBody(req, &body); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	idx := r.Index(body.Ready)
	if idx == nil {
		idx = []IndexEntry{}
	}
	writeJSON(w, http.StatusOK, idx)
}

func (r *Repository) serveLoad(w http.ResponseWriter, req *http.Request) {
	r.control(w, req, "load", r.Load)
}

func (r *Repository) serveUnload(w http.ResponseWriter, req *http.Request) {
	r.control(w, req, "unload", r.Unload)
}

func (r *Repository) control(w http.ResponseWriter, req *http.Request, verb string, do func(ctx context.Context, name string) error) {
	if err := readBody(req, &struct {
		Parameters map[string]any `json:"parameters"`
	}{}); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	name := req.PathValue("model")
	if err := do(req.Context(), name); err != nil {
		code := http.StatusBadRequest
		switch {
		case errors.Is(err, ErrNotFound):
			code = http.StatusNotFound
		case errors.Is(err, ErrNotExplicit):
			code = http.StatusServiceUnavailable
		}
		writeError(w, code, fmt.Errorf("failed to %s %q: %w", verb, name, err))
		return
	}
	w.WriteHeader(http.StatusOK)
}

// readBody decodes an optional JSON body into v.
func readBody(req *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(req.Body, maxControlBody+1))
	if err != nil {
		return fmt.Errorf("reading the body: %w", err)
	}
	if len(b) > maxControlBody {
		return fmt.Errorf("body over %d bytes", maxControlBody)
	}
	if len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("body: %w", err)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}
