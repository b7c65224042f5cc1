package oip_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/inferq/inferq/consumer/consumertest"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/oip"
	pb "github.com/inferq/inferq/oip/inferencepb"
	"github.com/inferq/inferq/tensor"
)

// Triton's gRPC server writes every output into raw_output_contents,
// whatever form the inputs came in (its response allocator adds one per
// output); a Triton client indexes it. So does inferq's, for typed inputs
// too (issue 25 item 10: typed inputs got typed outputs and a Triton client
// library panicked).
func TestGRPCOutputsAlwaysRaw(t *testing.T) {
	bs := bareServer(t, bareOpts{})
	c := serveGRPC(t, bs.srv, oip.GRPCConfig{Metrics: bs.met, Gatherer: bs.reg})()
	typed := &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{
		{Name: "x", Datatype: "FP32", Shape: []int64{1, 4}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{1, 2, 3, 4}}}}}
	resp, err := c.ModelInfer(callCtx(t), typed)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Outputs) != 1 || len(resp.RawOutputContents) != 1 || resp.Outputs[0].Contents != nil {
		t.Fatalf("typed inputs: %d outputs, %d raw_output_contents, contents %v; want the output raw only",
			len(resp.Outputs), len(resp.RawOutputContents), resp.Outputs[0].GetContents())
	}
	raw := resp.RawOutputContents[0]
	for i, want := range []float32{2, 4, 6, 8} {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])); got != want {
			t.Fatalf("raw output %v, want y = 2x", raw)
		}
	}
}

// HTTP has Triton's model configuration and statistics routes, as gRPC has
// ModelConfig and ModelStatistics (issue 25 item 10), in the JSON Triton's
// HTTP API writes: the .proto's field names, enums by name, numbers as
// numbers, every scalar field even when zero.
func TestHTTPModelConfigAndStats(t *testing.T) {
	bs := bareServer(t, bareOpts{model: func(m *models.Model) { m.Batching.MaxBatchSize = 8 }})
	h := oip.Handler(bs.srv, oip.HTTPConfig{Gatherer: bs.reg, Metrics: bs.met})
	for _, path := range []string{"/v2/models/m/config", "/v2/models/m/versions/1/config"} {
		rec := serveHTTP(h, "GET", path, nil, nil)
		var cfg struct {
			Name         string `json:"name"`
			Platform     string `json:"platform"`
			MaxBatchSize *int   `json:"max_batch_size"`
			Input        []struct {
				Name     string  `json:"name"`
				DataType string  `json:"data_type"`
				Dims     []int64 `json:"dims"`
			} `json:"input"`
			DynamicBatching struct {
				MaxQueueDelayMicroseconds *uint64 `json:"max_queue_delay_microseconds"`
			} `json:"dynamic_batching"`
		}
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &cfg) != nil {
			t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
		if cfg.Name != "m" || cfg.Platform != "onnxruntime_onnx" || cfg.MaxBatchSize == nil || *cfg.MaxBatchSize != 8 ||
			len(cfg.Input) != 1 || cfg.Input[0].Name != "x" || cfg.Input[0].DataType != "TYPE_FP32" || fmt.Sprint(cfg.Input[0].Dims) != "[4]" ||
			cfg.DynamicBatching.MaxQueueDelayMicroseconds == nil {
			t.Errorf("GET %s: %s", path, rec.Body)
		}
		if strings.Contains(rec.Body.String(), `"4"`) || strings.Contains(rec.Body.String(), "maxBatchSize") {
			t.Errorf("GET %s: numbers quoted or names in camel case: %s", path, rec.Body)
		}
	}
	if rec := serveHTTP(h, "POST", "/v2/models/m/infer", []byte(oipCases[0].body), nil); rec.Code != 200 {
		t.Fatalf("infer: %d %s", rec.Code, rec.Body)
	}
	for _, path := range []string{"/v2/models/m/stats", "/v2/models/m/versions/1/stats", "/v2/models/stats"} {
		rec := serveHTTP(h, "GET", path, nil, nil)
		var st struct {
			ModelStats []struct {
				Name           string `json:"name"`
				Version        string `json:"version"`
				InferenceStats struct {
					Success struct {
						Count uint64 `json:"count"`
					} `json:"success"`
				} `json:"inference_stats"`
			} `json:"model_stats"`
		}
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &st) != nil || len(st.ModelStats) != 1 {
			t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
		if s := st.ModelStats[0]; s.Name != "m" || s.Version != "1" || s.InferenceStats.Success.Count != 1 ||
			!strings.Contains(rec.Body.String(), `"inference_count": 1`) || !strings.Contains(rec.Body.String(), `"last_inference": 0`) {
			t.Errorf("GET %s: %s", path, rec.Body)
		}
	}
	for _, path := range []string{"/v2/models/nope/config", "/v2/models/m/versions/2/config", "/v2/models/nope/stats"} {
		if rec := serveHTTP(h, "GET", path, nil, nil); rec.Code != 404 || !strings.Contains(rec.Body.String(), `"error"`) {
			t.Errorf("GET %s: %d %s, want 404 with an error", path, rec.Code, rec.Body)
		}
	}
}

// POST /v2/repository/index answers without a model repository too, as
// gRPC's RepositoryIndex does: the served models, READY; with a
// repository, the repository's route answers.
func TestHTTPRepositoryIndexWithoutRepository(t *testing.T) {
	h := bareHandler(t)
	for _, body := range []string{"", `{}`, `{"ready":true}`} {
		rec := serveHTTP(h, "POST", "/v2/repository/index", []byte(body), nil)
		var idx []map[string]string
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &idx) != nil || len(idx) != 1 ||
			idx[0]["name"] != "m" || idx[0]["version"] != "1" || idx[0]["state"] != "READY" {
			t.Errorf("index with body %q: %d %s", body, rec.Code, rec.Body)
		}
	}
	if rec := serveHTTP(h, "POST", "/v2/repository/index", []byte(`{"ready":`), nil); rec.Code != 400 || !strings.Contains(rec.Body.String(), `"error"`) {
		t.Errorf("malformed body: %d %s, want 400", rec.Code, rec.Body)
	}
	repo := bareHandlerWith(t, bareOpts{http: func(c *oip.HTTPConfig) {
		c.Routes = map[string]http.Handler{"POST /v2/repository/index": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(`[{"name":"from-the-repository"}]`))
		})}
	}})
	if rec := serveHTTP(repo, "POST", "/v2/repository/index", nil, nil); !strings.Contains(rec.Body.String(), "from-the-repository") {
		t.Errorf("with a repository: %d %s", rec.Code, rec.Body)
	}
}

// Unknown routes answer {"error": ...} as JSON, as every other error does
// (Triton answers its unknown routes so): 404, and 405 with Allow for a
// known path and another method.
func TestHTTPUnknownRouteJSON(t *testing.T) {
	h := bareHandler(t)
	for _, tc := range []struct {
		method, path string
		code         int
		allow        string
	}{
		{"GET", "/nowhere", 404, ""},
		{"GET", "/v2/models/m/nowhere", 404, ""},
		{"POST", "/v3/models/m/infer", 404, ""},
		{"POST", "/v2", 405, "GET, HEAD"},
		{"DELETE", "/v2/models/m/infer", 405, "POST"},
	} {
		rec := serveHTTP(h, tc.method, tc.path, nil, nil)
		var e map[string]string
		if rec.Code != tc.code || rec.Header().Get("Content-Type") != "application/json" ||
			json.Unmarshal(rec.Body.Bytes(), &e) != nil || !strings.Contains(e["error"], tc.path) {
			t.Errorf("%s %s: %d %q %s, want %d with {\"error\": ...} naming the path", tc.method, tc.path, rec.Code, rec.Header().Get("Content-Type"), rec.Body, tc.code)
		}
		if rec.Header().Get("Allow") != tc.allow {
			t.Errorf("%s %s: Allow %q, want %q", tc.method, tc.path, rec.Header().Get("Allow"), tc.allow)
		}
	}
}

// HTTP's binary errors name the binary tensor extension's header, not the
// broker's content type (issue 25 item 10), and FP16 outputs are refused
// as JSON, as Triton refuses them ("sending FP16 data via JSON is not
// supported"), before the model runs; asked for in binary, they run.
func TestHTTPBinaryHintsAndFP16(t *testing.T) {
	info := tensor.ModelInfo{
		Inputs:  []tensor.TensorInfo{{Name: "x", DType: tensor.FP32, Dims: []int64{-1, 4}}, {Name: "h", DType: tensor.FP16, Dims: []int64{-1, 2}}},
		Outputs: []tensor.TensorInfo{{Name: "y", DType: tensor.FP32, Dims: []int64{-1, 4}}, {Name: "half", DType: tensor.FP16, Dims: []int64{-1, 2}}},
	}
	f := consumertest.NewFakeBatcher()
	h := bareHandlerWith(t, bareOpts{info: &info, batcher: f})
	x := `{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}`
	hBin := `{"name":"h","shape":[1,2],"datatype":"FP16","parameters":{"binary_data_size":4}}`
	for _, tc := range []struct {
		name, body string
		headerLen  bool // the JSON is the header of a binary body
		code       int
		want       []string
	}{
		{"binary_data_size without the header", `{"inputs":[` + x + `,` + hBin + `]}`, false, 400,
			[]string{`input \"h\": binary_data_size needs`, oip.HeaderInferenceLength}},
		{"FP16 as JSON", `{"inputs":[` + x + `,{"name":"h","shape":[1,2],"datatype":"FP16","data":[1,2]}]}`, false, 400,
			[]string{`input \"h\": FP16 data needs`, oip.HeaderInferenceLength}},
		{"binary sizes and body disagree", `{"inputs":[` + x + `,` + hBin + `]}`, true, 400,
			[]string{"binary_data_size values add up to 4 bytes, the body carries 6 after the", oip.HeaderInferenceLength}},
		{"FP16 output as JSON", `{"inputs":[` + x + `,` + hBin + `]}`, true, 400,
			[]string{`output \"half\": FP16`, "binary_data"}},
		{"FP16 output named, as JSON", `{"inputs":[` + x + `,` + hBin + `],"outputs":[{"name":"half"}]}`, true, 400,
			[]string{`output \"half\": FP16`}},
		{"FP16 output in binary", `{"inputs":[` + x + `,` + hBin + `],"outputs":[{"name":"half","parameters":{"binary_data":true}},{"name":"y"}]}`, true, 200, nil},
		{"every output in binary", `{"inputs":[` + x + `,` + hBin + `],"parameters":{"binary_data_output":true}}`, true, 200, nil},
		{"only the FP32 output", `{"inputs":[` + x + `,` + hBin + `],"outputs":[{"name":"y"}]}`, true, 200, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, header := []byte(tc.body), map[string]string{}
			if tc.headerLen {
				header[oip.HeaderInferenceLength] = fmt.Sprint(len(body))
				body = append(body, 0, 0x3c, 0, 0x40) // FP16 1, 2
				if tc.name == "binary sizes and body disagree" {
					body = append(body, 0, 0) // two bytes no input claims
				}
			}
			ran := f.Total.Load()
			rec := serveHTTP(h, "POST", "/v2/models/m/infer", body, header)
			if rec.Code != tc.code {
				t.Fatalf("%d %s, want %d", rec.Code, rec.Body, tc.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(rec.Body.String(), w) {
					t.Errorf("%s does not say %q", rec.Body, w)
				}
			}
			if strings.Contains(rec.Body.String(), "vnd.inferq") || strings.Contains(rec.Body.String(), "content-type") {
				t.Errorf("%s names the broker's content type", rec.Body)
			}
			if tc.code != 200 && f.Total.Load() != ran {
				t.Errorf("a refused request ran")
			}
		})
	}
}
