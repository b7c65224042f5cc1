package consumer

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// HTTPConfig configures the operations endpoints.
type HTTPConfig struct {
	Server   *Server
	Gatherer prometheus.Gatherer
	// Ready reports readiness beyond the broker (models warm); nil: true.
	Ready func() bool
	// Devices describes where each model's instances run, for /v1/models.
	Devices map[string][]string
}

// Handler serves /healthz, /readyz, /metrics, /v1/models,
// /v1/tasks/{id} and the Open Inference Protocol's /v2 routes (see oip.go)
// on its own mux.
func Handler(c HTTPConfig) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		warm := c.Ready == nil || c.Ready()
		broker := c.Server.Ready()
		code := http.StatusOK
		if !warm || !broker {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, map[string]bool{"ready": code == http.StatusOK, "models_warm": warm, "broker_up": broker})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(c.Gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		type model struct {
			Name    string       `json:"name"`
			Version string       `json:"version"`
			Queue   string       `json:"queue"`
			Devices []string     `json:"devices,omitempty"`
			Inputs  []tensorMeta `json:"inputs"`
			Outputs []tensorMeta `json:"outputs"`
		}
		var list []model
		for _, m := range c.Server.cfg.Models {
			list = append(list, model{Name: m.Config.Name, Version: m.Version, Queue: m.Config.Queue,
				Devices: c.Devices[m.Config.Name], Inputs: tensorMetas(m.Info.Inputs), Outputs: tensorMetas(m.Info.Outputs)})
		}
		writeJSON(w, http.StatusOK, map[string]any{"models": list})
	})
	mux.HandleFunc("GET /v1/tasks/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		body, ok := c.Server.cfg.Store.Get(id)
		if !ok {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "task " + id + " is not known to this worker (records are kept in its spool and recent cache)"})
			return
		}
		if r, err := task.ParseRecord(body); err == nil && len(r.Binary) > 0 {
			// A record with binary outputs: the JSON part, then raw bytes.
			w.Header().Set("Inference-Header-Content-Length", strconv.Itoa(len(body)-len(r.Binary)))
			w.Header().Set("Content-Type", "application/octet-stream")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		w.Write(body)
	})
	mountOIP(mux, c)
	return mux
}

// tensorMeta is a tensor's metadata as the Open Inference Protocol (and
// /v1/models) show it.
type tensorMeta struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

func tensorMetas(ts []tensor.TensorInfo) []tensorMeta {
	out := make([]tensorMeta, len(ts))
	for i, t := range ts {
		out[i] = tensorMeta{t.Name, t.Datatype(), t.Dims}
	}
	return out
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
