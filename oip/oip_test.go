package oip_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/consumer/consumertest"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/oip"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// oipServer serves a consumer (one that never runs: the /v2 routes need
// only its models and batchers) over HTTP, with a real batcher of the fake
// model; ready is what the Ready hook answers.
func oipServer(t *testing.T) (*consumer.Metrics, string, *atomic.Bool) {
	t.Helper()
	r := &consumertest.GatedRunner{F: consumertest.NewFakeBatcher()}
	b := bareServer(t, bareOpts{batcher: consumertest.NewBatcher(t, r, 8)})
	var ready atomic.Bool
	ready.Store(true)
	srv := httptest.NewServer(oip.Handler(b.srv, oip.HTTPConfig{Gatherer: b.reg, Metrics: b.met, Ready: ready.Load}))
	t.Cleanup(srv.Close)
	return b.met, srv.URL, &ready
}

// do is consumertest.Do.
var do = consumertest.Do

func TestOIPMetadataAndHealth(t *testing.T) {
	_, url, ready := oipServer(t)
	for _, tc := range []struct {
		path string
		code int
		want string // in the body
	}{
		{"/v2", 200, `"name": "inferq"`},
		{"/v2/health/live", 200, ""},
		{"/v2/health/ready", 200, ""},
		{"/v2/models/m", 200, `"platform": "onnxruntime_onnx"`},
		{"/v2/models/m/versions/1", 200, `"versions": [`},
		{"/v2/models/m/ready", 200, ""},
		{"/v2/models/m/versions/1/ready", 200, ""},
		{"/v2/models/nope", 404, `unknown model \"nope\"`},
		{"/v2/models/nope/ready", 404, `"error"`},
		{"/v2/models/m/versions/2", 404, `no version \"2\"`},
		{"/v2/models/m/versions/2/ready", 404, `"error"`},
	} {
		resp, body := do(t, "GET", url+tc.path, nil, nil)
		if resp.StatusCode != tc.code || !strings.Contains(string(body), tc.want) {
			t.Errorf("GET %s: %s %s, want %d with %s", tc.path, resp.Status, body, tc.code, tc.want)
		}
	}
	resp, body := do(t, "GET", url+"/v2/models/m", nil, nil)
	var md struct {
		Name   string
		Inputs []struct {
			Name, Datatype string
			Shape          []int64
		}
	}
	if err := json.Unmarshal(body, &md); err != nil || resp.StatusCode != 200 {
		t.Fatalf("metadata %s: %v", body, err)
	}
	if md.Name != "m" || len(md.Inputs) != 1 || md.Inputs[0].Name != "x" || md.Inputs[0].Datatype != "FP32" || len(md.Inputs[0].Shape) != 2 {
		t.Errorf("metadata %+v", md)
	}
	// Triton answers 400 while not ready.
	ready.Store(false)
	for _, p := range []string{"/v2/health/ready", "/v2/models/m/ready"} {
		if resp, _ := do(t, "GET", url+p, nil, nil); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("GET %s while not ready: %s, want 400", p, resp.Status)
		}
	}
	if resp, _ := do(t, "GET", url+"/v2/health/live", nil, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("live while not ready: %s", resp.Status)
	}
}

// oipCases are infer requests and what they must get; the fuzz test's
// seeds come from them too.
var oipCases = []struct {
	name   string
	body   string
	code   int
	want   string // in the body
	output []float32
}{
	{"json", `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`, 200, `"model_name":"m"`, []float32{2, 4, 6, 8}},
	{"nested data and id", `{"id":"req-1","inputs":[{"name":"x","shape":[2,4],"datatype":"FP32","data":[[1,2,3,4],[5,6,7,8]]}],"outputs":[{"name":"y"}]}`,
		200, `"id":"req-1"`, []float32{2, 4, 6, 8, 10, 12, 14, 16}},
	{"parameters null", `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}],"parameters":null,"outputs":null}`, 200, `"outputs"`, []float32{2, 4, 6, 8}},
	{"not json", `{"inputs":`, 400, `"error"`, nil},
	{"trailing data", `{"inputs":[]} {}`, 400, `data after the JSON object`, nil},
	{"no inputs", `{"id":"x"}`, 400, `\"inputs\": want an array`, nil},
	{"empty inputs", `{"inputs":[]}`, 400, `input \"x\": missing`, nil},
	{"wrong shape", `{"inputs":[{"name":"x","shape":[1,3],"datatype":"FP32","data":[1,2,3]}]}`, 400, `expected FP32 [-1,4], got FP32 [1,3]`, nil},
	{"wrong datatype", `{"inputs":[{"name":"x","shape":[1,4],"datatype":"INT32","data":[1,2,3,4]}]}`, 400, `INT32`, nil},
	{"data does not fit shape", `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3]}]}`, 400, `input \"x\"`, nil},
	{"unknown input", `{"inputs":[{"name":"z","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`, 400, `\"z\"`, nil},
	{"unknown output", `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}],"outputs":[{"name":"nope"}]}`, 400, `nope`, nil},
	{"id with a space", `{"id":"req 1","inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`, 400, `invalid name: id \"req 1\" has \" \" at byte 3`, nil},
	{"id with a newline", `{"id":"a\nb","inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`, 400, `invalid name: id \"a\\nb\"`, nil},
	{"id over 256 bytes", `{"id":"` + strings.Repeat("r", 257) + `","inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`, 400, `is 257 bytes, over the limit of 256`, nil},
	{"id not a string", `{"id":5,"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`, 400, `\"id\": want a string`, nil},
	{"inference failure", `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1000,2,3,4]}]}`, 500, `inference failed: boom`, nil},
	{"binary data without the header", `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":16}}]}`, 400, `binary`, nil},
}

func TestOIPInfer(t *testing.T) {
	met, url, _ := oipServer(t)
	for _, tc := range oipCases {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := do(t, "POST", url+"/v2/models/m/infer", []byte(tc.body), map[string]string{"Content-Type": "application/json"})
			if resp.StatusCode != tc.code || !strings.Contains(string(body), tc.want) {
				t.Fatalf("%s: %s, want %d with %s", resp.Status, body, tc.code, tc.want)
			}
			if tc.code != 200 {
				var e map[string]string
				if err := json.Unmarshal(body, &e); err != nil || e["error"] == "" || len(e) != 1 {
					t.Errorf(`error body %s: want {"error": "..."}`, body)
				}
				return
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			checkOIPOutput(t, body, nil, tc.output)
		})
	}
	t.Run("unknown model", func(t *testing.T) {
		resp, body := do(t, "POST", url+"/v2/models/nope/infer", []byte(oipCases[0].body), nil)
		if resp.StatusCode != 404 || !strings.Contains(string(body), `unknown model \"nope\"`) {
			t.Fatalf("%s %s", resp.Status, body)
		}
	})
	t.Run("versioned", func(t *testing.T) {
		resp, body := do(t, "POST", url+"/v2/models/m/versions/1/infer", []byte(oipCases[0].body), nil)
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s", resp.Status, body)
		}
	})
	if n := testutil.ToFloat64(met.HTTPInfer.WithLabelValues(consumertest.ModelName, consumer.OutcomeSuccess)); n != 4 {
		t.Errorf("inferq_http_infer_total{success} = %v, want 4", n)
	}
	if n := testutil.ToFloat64(met.HTTPInfer.WithLabelValues(consumertest.ModelName, consumer.OutcomeFailure)); n != 1 {
		t.Errorf("inferq_http_infer_total{failure} = %v, want 1", n)
	}
}

// checkOIPOutput decodes a response (JSON, binary data after it) and
// compares its only output y.
func checkOIPOutput(t *testing.T, js, bin []byte, want []float32) {
	t.Helper()
	ir, err := task.DecodeInferResponse(js, bin)
	if err != nil {
		t.Fatalf("response %s: %v", js, err)
	}
	if ir.ModelName != consumertest.ModelName || ir.ModelVersion != "1" || len(ir.Outputs) != 1 || ir.Outputs[0].Name != "y" {
		t.Fatalf("response %s", js)
	}
	y, err := tensor.Values[float32](ir.Outputs[0].Tensor)
	if err != nil {
		t.Fatal(err)
	}
	if len(y) != len(want) {
		t.Fatalf("y = %v, want %v", y, want)
	}
	for i := range y {
		if y[i] != want[i] {
			t.Fatalf("y = %v, want %v", y, want)
		}
	}
}

// TestOIPBinary sends the input as raw bytes (the binary tensor extension)
// and asks for the output the same way.
func TestOIPBinary(t *testing.T) {
	_, url, _ := oipServer(t)
	raw := make([]byte, 0, 32)
	for _, v := range []float32{1, 2, 3, 4, 5, 6, 7, 8} {
		raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
	}
	for _, tc := range []struct{ name, header string }{
		{"per output", `{"inputs":[{"name":"x","shape":[2,4],"datatype":"FP32","parameters":{"binary_data_size":32}}],"outputs":[{"name":"y","parameters":{"binary_data":true}}]}`},
		{"all outputs", `{"inputs":[{"name":"x","shape":[2,4],"datatype":"FP32","parameters":{"binary_data_size":32}}],"parameters":{"binary_data_output":true}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := append([]byte(tc.header), raw...)
			resp, out := do(t, "POST", url+"/v2/models/m/infer", body, map[string]string{
				"Content-Type": "application/octet-stream", oip.HeaderInferenceLength: strconv.Itoa(len(tc.header)),
			})
			if resp.StatusCode != 200 {
				t.Fatalf("%s %s", resp.Status, out)
			}
			n, err := strconv.Atoi(resp.Header.Get(oip.HeaderInferenceLength))
			if err != nil || n <= 0 || n >= len(out) || len(out)-n != 32 {
				t.Fatalf("%s %q: %d bytes: want the JSON and 32 bytes of binary output", oip.HeaderInferenceLength, resp.Header.Get(oip.HeaderInferenceLength), len(out))
			}
			if !strings.Contains(string(out[:n]), `"binary_data_size":32`) {
				t.Errorf("response header %s", out[:n])
			}
			checkOIPOutput(t, out[:n], out[n:], []float32{2, 4, 6, 8, 10, 12, 14, 16})
		})
	}
	t.Run("header length over the body", func(t *testing.T) {
		resp, out := do(t, "POST", url+"/v2/models/m/infer", []byte(`{"inputs":[]}`), map[string]string{oip.HeaderInferenceLength: "99"})
		if resp.StatusCode != 400 || !strings.Contains(string(out), oip.HeaderInferenceLength) {
			t.Fatalf("%s %s", resp.Status, out)
		}
	})
	t.Run("binary size mismatch", func(t *testing.T) {
		header := `{"inputs":[{"name":"x","shape":[2,4],"datatype":"FP32","parameters":{"binary_data_size":32}}]}`
		body := append([]byte(header), raw[:16]...)
		resp, out := do(t, "POST", url+"/v2/models/m/infer", body, map[string]string{oip.HeaderInferenceLength: strconv.Itoa(len(header))})
		if resp.StatusCode != 400 || !strings.Contains(string(out), "binary_data_size") {
			t.Fatalf("%s %s", resp.Status, out)
		}
	})
}

// FuzzOIPInfer posts arbitrary infer bodies (JSON, or the binary form when
// headerLen >= 0): the answer is 200 with a readable response, or an error
// status with {"error": "..."}; never a panic or a hang.
func FuzzOIPInfer(f *testing.F) {
	for _, tc := range oipCases {
		f.Add([]byte(tc.body), -1)
	}
	header := `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":16}}],"outputs":[{"name":"y","parameters":{"binary_data":true}}]}`
	f.Add(append([]byte(header), make([]byte, 16)...), len(header))
	f.Add([]byte(header), len(header))
	f.Add([]byte(`{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}],"id":"\u00e9\"x"}`), -1)

	handler := bareHandler(f)
	f.Fuzz(func(t *testing.T, body []byte, headerLen int) {
		req := httptest.NewRequest("POST", "/v2/models/m/infer", bytes.NewReader(body))
		if headerLen >= 0 {
			req.Header.Set(oip.HeaderInferenceLength, strconv.Itoa(headerLen))
		}
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		out := rec.Body.Bytes()
		switch rec.Code {
		case http.StatusOK:
			n := len(out)
			if hl := rec.Header().Get(oip.HeaderInferenceLength); hl != "" {
				var err error
				if n, err = strconv.Atoi(hl); err != nil || n < 0 || n > len(out) {
					t.Fatalf("response %s %q for %d bytes", oip.HeaderInferenceLength, hl, len(out))
				}
			}
			ir, err := task.DecodeInferResponse(out[:n], out[n:])
			if err != nil || len(ir.Outputs) != 1 || ir.Outputs[0].Name != "y" {
				t.Fatalf("200 with an unreadable response %q: %v", out, err)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusInternalServerError:
			var e map[string]string
			if err := json.Unmarshal(out, &e); err != nil || e["error"] == "" {
				t.Fatalf("%d with body %q: want {\"error\": \"...\"}", rec.Code, out)
			}
		default:
			t.Fatalf("status %d for %q", rec.Code, body)
		}
	})
}

// bareHandler serves the fake model over HTTP from a consumer that never
// runs (its broker address is dead): the /v2 routes need only its models.
func bareHandler(tb testing.TB) http.Handler { return bareHandlerWith(tb, bareOpts{}) }

// bareOpts adjust bareHandlerWith's model, batcher and HTTP config.
type bareOpts struct {
	model   func(*models.Model)
	batcher consumer.Batcher
	http    func(*oip.HTTPConfig)
	info    *tensor.ModelInfo // nil: consumertest.FakeInfo
}

func bareHandlerWith(tb testing.TB, o bareOpts) http.Handler {
	tb.Helper()
	b := bareServer(tb, o)
	hc := oip.HTTPConfig{Gatherer: b.reg, Metrics: b.met}
	if o.http != nil {
		o.http(&hc)
	}
	return oip.Handler(b.srv, hc)
}

// bare is a consumer that never runs (consumertest.Offline) serving the
// fake model, and its metrics.
type bare struct {
	srv *consumer.Server
	reg *prometheus.Registry
	met *consumer.Metrics
}

// bareServer is bareHandlerWith's consumer and its metrics.
func bareServer(tb testing.TB, o bareOpts) bare {
	tb.Helper()
	reg := prometheus.NewRegistry()
	met, err := consumer.NewMetrics(reg)
	if err != nil {
		tb.Fatal(err)
	}
	b := o.batcher
	if b == nil {
		b = consumertest.NewBatcher(tb, &consumertest.GatedRunner{F: consumertest.NewFakeBatcher()}, 8)
	}
	m := consumertest.Model()
	if o.model != nil {
		o.model(&m)
	}
	info := consumertest.FakeInfo
	if o.info != nil {
		info = *o.info
	}
	srv := consumertest.Offline(tb, consumer.Config{Metrics: met,
		Models: []consumer.Model{{Config: m, Info: info, Batcher: b}}})
	return bare{srv: srv, reg: reg, met: met}
}

// trickle is a request body that has sent a few bytes of a body that
// declared many more: Read returns them, then EOF (the client gave up).
type trickle struct{ data []byte }

func (t *trickle) Read(p []byte) (int, error) {
	if len(t.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, t.data)
	t.data = t.data[n:]
	return n, nil
}

// An infer body's buffer follows the bytes that arrived, not the declared
// Content-Length: 60 MB declared and 10 bytes sent allocate kilobytes (it
// was 60 MB per request, 2.9 GB RSS for 50 slow clients).
func TestOIPBodyMemoryFollowsArrival(t *testing.T) {
	handler := bareHandler(t)
	serve := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/v2/models/m/infer", &trickle{data: []byte(`{"inputs":`)})
		req.ContentLength = 60_000_000
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		return rec
	}
	serve() // warm: the first request builds what every later one shares
	var before, after goruntime.MemStats
	goruntime.ReadMemStats(&before)
	rec := serve()
	goruntime.ReadMemStats(&after)
	if rec.Code != http.StatusBadRequest {
		t.Errorf("truncated body: %d %s, want 400", rec.Code, rec.Body)
	}
	// 1 MiB leaves room for the handler's own garbage and the background
	// goroutines of the consumer's dead connection; 60 MB does not fit.
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Errorf("a request that declared 60 MB and sent 10 bytes allocated %d bytes", got)
	}
}

// zeros is an endless body of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// A body over limits.max_body_bytes is refused with 413 naming the field,
// whether it declares its length or streams past the limit.
func TestOIPBodyOverLimit(t *testing.T) {
	const limit = 1 << 16
	handler := bareHandlerWith(t, bareOpts{model: func(m *models.Model) { m.Limits.MaxBodyBytes = limit }})
	for _, tc := range []struct {
		name   string
		body   io.Reader
		length int64
	}{
		{"declared", strings.NewReader("{}"), limit + 1},
		{"declared huge", strings.NewReader("{}"), 1 << 40},
		{"streamed", io.LimitReader(zeros{}, limit+1), -1},
		{"streamed endlessly", zeros{}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest("POST", "/v2/models/m/infer", tc.body)
			req.ContentLength = tc.length
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, req)
			if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), "limits.max_body_bytes") {
				t.Errorf("%d %s, want 413 naming limits.max_body_bytes", rec.Code, rec.Body)
			}
		})
	}
	req := httptest.NewRequest("POST", "/v2/models/m/infer", strings.NewReader(oipCases[0].body))
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Errorf("a body under the limit: %d %s", rec.Code, rec.Body)
	}
}

// blockingBatcher holds every item until release is closed; entered
// receives once per item taken.
type blockingBatcher struct {
	f       *consumertest.FakeBatcher
	entered chan struct{}
	release chan struct{}
}

func (b *blockingBatcher) Enqueue(ctx context.Context, r *batch.Request) error {
	go func() {
		b.entered <- struct{}{}
		select {
		case <-b.release:
		case <-ctx.Done():
			r.Finish(batch.ItemResult{Err: ctx.Err()})
			return
		}
		r.Start(1)
		r.Finish(b.f.Run(r.Item))
	}()
	return nil
}

// Infer requests beyond http.max_concurrent_requests are answered 503 with
// Retry-After at once, not queued; the slots come back when requests end.
func TestOIPConcurrencyCap(t *testing.T) {
	b := &blockingBatcher{f: consumertest.NewFakeBatcher(), entered: make(chan struct{}, 8), release: make(chan struct{})}
	handler := bareHandlerWith(t, bareOpts{batcher: b, http: func(c *oip.HTTPConfig) { c.MaxConcurrentInfer = 2 }})
	infer := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest("POST", "/v2/models/m/infer", strings.NewReader(oipCases[0].body)))
		return rec
	}
	held := make(chan *httptest.ResponseRecorder, 2)
	for range 2 {
		go func() { held <- infer() }()
	}
	for range 2 {
		select {
		case <-b.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the first two requests did not reach the batcher")
		}
	}
	third := make(chan *httptest.ResponseRecorder, 1)
	go func() { third <- infer() }()
	var rec *httptest.ResponseRecorder
	select {
	case rec = <-third:
	case <-time.After(10 * time.Second):
		close(b.release)
		t.Fatal("a third request was not answered: it waits behind the two in progress")
	}
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "http.max_concurrent_requests") {
		t.Errorf("a third request: %d %q %s, want 503 with Retry-After naming http.max_concurrent_requests", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	// Over the network too, and without waiting for a body the client
	// declared and has not sent: the server closes instead of reading it.
	srv := httptest.NewServer(handler)
	defer srv.Close()
	for _, declared := range []int{10, 1 << 30} {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", declared)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if !strings.HasPrefix(line, "HTTP/1.1 503") {
			t.Errorf("a request declaring %d body bytes while full: %q %v, want 503 at once", declared, line, err)
		}
	}
	// Other routes are not capped.
	if rec := httptest.NewRecorder(); true {
		handler.ServeHTTP(rec, httptest.NewRequest("GET", "/v2/models/m", nil))
		if rec.Code != http.StatusOK {
			t.Errorf("metadata while infer is full: %d", rec.Code)
		}
	}
	close(b.release)
	for range 2 {
		if rec := <-held; rec.Code != http.StatusOK {
			t.Errorf("a held request: %d %s", rec.Code, rec.Body)
		}
	}
	if rec := infer(); rec.Code != http.StatusOK {
		t.Errorf("after the held requests ended: %d %s", rec.Code, rec.Body)
	}
}

// serveHTTP serves one request on h and returns what it answered.
func serveHTTP(h http.Handler, method, path string, body []byte, header map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}
