package oip

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// HTTPConfig configures the operations endpoints.
type HTTPConfig struct {
	// Gatherer is served on /metrics.
	Gatherer prometheus.Gatherer
	// Metrics counts the infer requests (inferq_http_infer_total and the
	// rest, see Observer); nil: not counted.
	Metrics Observer
	// Ready reports readiness beyond the broker (models warm); nil: true.
	Ready func() bool
	// Devices describes where each model's instances run, for /v1/models.
	Devices map[string][]string
	// AuthToken, when set, is the bearer token every request but the
	// health checks must carry (Authorization: Bearer <token>).
	AuthToken string
	// MaxConcurrentInfer bounds the infer requests being admitted or run;
	// a request takes its slot once its body has arrived, so a client
	// that trickles its body holds none. One more is answered 503 with
	// Retry-After (at once, unread, when every slot is taken as it
	// arrives). 0: models.DefaultHTTPMaxConcurrentRequests.
	MaxConcurrentInfer int
	// MaxBodyMemory bounds the bytes of infer request bodies in memory,
	// being read or held by a request in progress (a body's buffer
	// follows the bytes that arrived); a request whose body would pass
	// it is answered 503 with Retry-After. 0: MaxConcurrentInfer x
	// models.DefaultMaxBodyBytes, the bound the slots gave when they were
	// taken before the body was read.
	MaxBodyMemory int64
	// Routes are more handlers, by mux pattern, behind AuthToken too (the
	// model repository extension, /v2/repository/...).
	Routes map[string]http.Handler
	// Logger receives the panics of handlers, recovered (ERROR); nil
	// discards them.
	Logger *slog.Logger
}

// healthPaths are served without the bearer token: the kubelet's probes
// and load balancers carry none, and they tell nothing about tasks.
var healthPaths = map[string]bool{"/healthz": true, "/readyz": true, "/v2/health/live": true, "/v2/health/ready": true}

// Handler serves /healthz, /readyz, /metrics, /v1/models,
// /v1/tasks/{id} and the Open Inference Protocol's /v2 routes (see oip.go)
// over s's models on its own mux; with c.AuthToken, all but the health
// checks ask for it. It is safe for concurrent use.
func Handler[M Model](s Server[M], c HTTPConfig) http.Handler {
	mux := http.NewServeMux()
	var h http.Handler = mux
	if c.AuthToken != "" {
		h = requireToken(c.AuthToken, mux)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		warm := c.Ready == nil || c.Ready()
		broker, full, journal := s.BrokerAnswers(), s.StoreFull(), !s.JournalFailing()
		code := http.StatusOK
		if !warm || !broker || full || !journal {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, map[string]bool{"ready": code == http.StatusOK, "models_warm": warm, "broker_up": broker, "spool_full": full, "journal_ok": journal})
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
		for _, m := range s.Models() {
			cfg, info := m.ModelConfig(), m.ModelInfo()
			list = append(list, model{Name: cfg.Name, Version: m.Serving(), Queue: cfg.Queue,
				Devices: c.Devices[cfg.Name], Inputs: tensorMetas(info.Inputs), Outputs: tensorMetas(info.Outputs)})
		}
		writeJSON(w, http.StatusOK, map[string]any{"models": list})
	})
	mux.HandleFunc("GET /v1/tasks/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		body, ok := s.Record(id)
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
	mountOIP(mux, s, c)
	for pattern, rh := range c.Routes {
		mux.Handle(pattern, rh)
	}
	if _, taken := c.Routes["/"]; !taken {
		mux.HandleFunc("/", noRoute(mux))
	}
	return recoverHTTP(logger(c.Logger), h)
}

// requireToken answers 401 to a request without "Authorization: Bearer
// <token>", health checks aside.
func requireToken(token string, next http.Handler) http.Handler {
	want := newBearer(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if healthPaths[r.URL.Path] {
			next.ServeHTTP(w, r)
			return
		}
		if err := want.check(r.Header.Get("Authorization")); err != nil {
			if errors.Is(err, errNoBearer) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="inferq"`)
			} else {
				w.Header().Set("WWW-Authenticate", `Bearer realm="inferq", error="invalid_token"`)
			}
			oipError(w, http.StatusUnauthorized, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bearer is the hash of a bearer token, to check Authorization values
// (HTTP headers, gRPC metadata) against.
type bearer [sha256.Size]byte

func newBearer(token string) bearer { return sha256.Sum256([]byte(token)) }

var (
	errNoBearer  = errors.New("this server requires a bearer token (Authorization: Bearer <http.auth_token>)")
	errBadBearer = errors.New("the bearer token is not http.auth_token")
)

// check reports whether auth is "Bearer <the token>": errNoBearer or
// errBadBearer. It takes the same time for every wrong token: both sides
// are hashed to a fixed length first, so neither the content nor the
// length of the token leaks.
func (b bearer) check(auth string) error {
	scheme, got, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return errNoBearer
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
	if subtle.ConstantTimeCompare(sum[:], b[:]) != 1 {
		return errBadBearer
	}
	return nil
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
