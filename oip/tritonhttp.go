package oip

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	pb "github.com/inferq/inferq/oip/inferencepb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Triton's HTTP routes beside the Open Inference Protocol's, the HTTP
// side of the gRPC RPCs of triton.go and grpcrepo.go:
//
//	GET  /v2/models/{m}[/versions/{v}]/config  Triton's configuration of the model
//	GET  /v2/models/{m}[/versions/{v}]/stats   its statistics ({"model_stats": [...]})
//	GET  /v2/models/stats                      every model's
//	POST /v2/repository/index                  without a model repository (HTTPConfig.Routes
//	                                           has none): the served models, READY
//
// and {"error": "..."} for a route that does not exist (404) or a method
// the path does not take (405 with Allow), as every other error.

func (o *v2[M]) modelConfig(w http.ResponseWriter, r *http.Request) {
	m, ok := o.model(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, tritonJSON(tritonConfig(m.ModelConfig(), m.ModelInfo())))
}

func (o *v2[M]) modelStats(w http.ResponseWriter, r *http.Request) {
	var ms []M
	if r.PathValue("model") == "" {
		ms = o.s.Models()
	} else {
		m, ok := o.model(w, r)
		if !ok {
			return
		}
		ms = []M{m}
	}
	resp := &pb.ModelStatisticsResponse{}
	for _, m := range ms {
		resp.ModelStats = append(resp.ModelStats, tritonStats(o.gather, m.ModelConfig().Name, m.Serving()))
	}
	js := tritonJSON(resp)
	if list, ok := js["model_stats"].([]any); ok {
		for _, st := range list {
			// Not measured (see tritonStats), and not declared in
			// inferq's subset of Triton's messages: empty, as a
			// model's that never ran a batch is in Triton's answer.
			st.(map[string]any)["batch_stats"] = []any{}
		}
	}
	writeJSON(w, http.StatusOK, js)
}

// maxIndexBody bounds a repository index request's body ({"ready": b}).
const maxIndexBody = 64 << 10

// repositoryIndex is the index of a server without a model repository:
// every served model, READY (the ready flag changes nothing), as gRPC's
// RepositoryIndex answers without one.
func (o *v2[M]) repositoryIndex(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxIndexBody+1))
	switch {
	case err != nil:
		oipError(w, http.StatusBadRequest, fmt.Errorf("reading the request body: %w", err))
		return
	case len(b) > maxIndexBody:
		oipError(w, http.StatusBadRequest, fmt.Errorf("request body over %d bytes", maxIndexBody))
		return
	}
	if len(strings.TrimSpace(string(b))) > 0 {
		var body struct {
			Ready bool `json:"ready"`
		}
		if err := json.Unmarshal(b, &body); err != nil {
			oipError(w, http.StatusBadRequest, fmt.Errorf(`request body: want {"ready": true or false}: %w`, err))
			return
		}
	}
	type entry struct {
		Name    string `json:"name"`
		Version string `json:"version"`
		State   string `json:"state"`
	}
	idx := []entry{}
	for _, m := range o.s.Models() {
		idx = append(idx, entry{Name: m.ModelConfig().Name, Version: m.Serving(), State: "READY"})
	}
	writeJSON(w, http.StatusOK, idx)
}

// noRoute answers a request no other route takes: 405 with Allow when
// the path takes other methods, else 404; both {"error": "..."}.
func noRoute(mux *http.ServeMux) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions} {
			if m == r.Method {
				continue
			}
			other := r.Clone(r.Context())
			other.Method = m
			if _, p := mux.Handler(other); p != "" && p != "/" {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			oipError(w, http.StatusMethodNotAllowed, fmt.Errorf("%s %s: method not allowed (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", ")))
			return
		}
		oipError(w, http.StatusNotFound, fmt.Errorf("%s %s: no such route", r.Method, r.URL.Path))
	}
}

// tritonJSON is m as Triton's HTTP API writes its protobuf messages: the
// .proto's field names, enums by name, 64-bit integers as JSON numbers
// (protojson quotes them), every scalar and repeated field even when zero
// or empty, a message field only when set, a oneof member only when it is
// the one set.
func tritonJSON(m proto.Message) map[string]any { return jsonMessage(m.ProtoReflect()) }

func jsonMessage(m protoreflect.Message) map[string]any {
	out := map[string]any{}
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		oneof := fd.ContainingOneof() != nil && !fd.ContainingOneof().IsSynthetic()
		single := fd.Kind() == protoreflect.MessageKind && !fd.IsList() && !fd.IsMap()
		if (oneof || single) && !m.Has(fd) {
			continue
		}
		v := m.Get(fd)
		switch {
		case fd.IsList():
			l := v.List()
			arr := make([]any, l.Len())
			for j := range arr {
				arr[j] = jsonScalar(fd, l.Get(j))
			}
			out[string(fd.Name())] = arr
		case fd.IsMap():
			mm := map[string]any{}
			v.Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
				mm[k.String()] = jsonScalar(fd.MapValue(), v)
				return true
			})
			out[string(fd.Name())] = mm
		default:
			out[string(fd.Name())] = jsonScalar(fd, v)
		}
	}
	return out
}

func jsonScalar(fd protoreflect.FieldDescriptor, v protoreflect.Value) any {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name())
		}
		return int32(v.Enum())
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return jsonMessage(v.Message())
	}
	return v.Interface() // bool, integers, floats, string, []byte (base64)
}
