package consumer_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/broker/brokertest"
	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/models/examples"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/oip"
	"github.com/inferq/inferq/runtime"
	"github.com/inferq/inferq/task"
	"github.com/prometheus/client_golang/prometheus"
)

// The round trip benchmarks serve the real mlp example (onnxruntime on the
// CPU, INFERQ_ORT_LIB or ../lib) from a consumer on the embedded broker,
// next to the broker's own query round trip (a responder that answers at
// once). Run:
//
//	go test -run '^$' -bench 'Query|OIP' -benchtime 2000x ./consumer/

// mlpBench is a broker, an echo query responder on channel "echo", and a
// consumer serving mlp on queue "inferq.mlp" (queries and HTTP).
type mlpBench struct {
	prod *mq.Conn
	url  string // the consumer's HTTP server
	body []byte // an mlp query in the adapter's format
	oip  []byte // an mlp OIP infer request
}

func newMLPBench(b *testing.B, delay time.Duration) *mlpBench {
	b.Helper()
	lib, err := runtime.LocateLibrary(runtime.LibrarySearch{Env: os.Getenv("INFERQ_ORT_LIB"), WorkDir: ".."})
	if err != nil {
		b.Skipf("onnxruntime library not available: %v", err)
	}
	env, err := runtime.NewEnv(lib, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { env.Close() })
	sess, err := runtime.NewSession(env, runtime.SessionConfig{Name: "mlp", Model: examples.MLP(), IntraOpThreads: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sess.Close() })
	bat, err := batch.New(batch.Config{Name: "mlp", Policy: batch.Policy{MaxBatchSize: 64, MaxQueueDelay: delay},
		Runners: []batch.Runner{sess}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	b.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() { _ = bat.Run(ctx) })

	srv := brokertest.NewServer(b, broker.Options{})
	dial := func(id string) *mq.Conn {
		c, err := mq.Dial(ctx, mq.Config{Address: srv.Addr, ClientID: id})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		return c
	}
	echo := dial("echo")
	answer := []byte(`{"status":"SUCCESS","result":{"model_name":"echo","model_version":"1","outputs":[]},"error":null}`)
	wg.Go(func() {
		_ = echo.SubscribeQueries(ctx, "echo", "inferq", func(context.Context, *mq.QueryRequest) mq.QueryResponse {
			return mq.QueryResponse{Body: answer}
		})
	})

	m := models.NewModel("mlp")
	m.Path, m.Queue = "unused.onnx", "inferq.mlp"
	cfg := models.Config{Models: []models.Model{m}}
	cfg.SetDefaults()
	reg := prometheus.NewRegistry()
	met, err := consumer.NewMetrics(reg)
	if err != nil {
		b.Fatal(err)
	}
	cons, err := consumer.New(consumer.Config{Broker: consumer.Conn(dial("inferq")), Store: nopStore{}, Metrics: met,
		Models: []consumer.Model{{Config: cfg.Models[0], Info: sess.Info(), Batcher: bat}}})
	if err != nil {
		b.Fatal(err)
	}
	wg.Go(func() { _ = cons.Run(ctx) })
	hs := httptest.NewServer(oip.Handler(cons, oip.HTTPConfig{Gatherer: reg, Metrics: met}))
	b.Cleanup(hs.Close)

	x := make([]string, examples.MLPInputs)
	for i := range x {
		x[i] = fmt.Sprint(float32(i) / 16)
	}
	data := strings.Join(x, ",")
	mb := &mlpBench{prod: dial("producer"), url: hs.URL,
		body: []byte(`{"task_name":"mlp","args":[[` + data + `]],"kwargs":{}}`),
		oip:  []byte(`{"inputs":[{"name":"x","shape":[1,16],"datatype":"FP32","data":[` + data + `]}]}`),
	}
	// Both subscriptions live, and the SDK's streams warm.
	for _, ch := range []string{"echo", "inferq.mlp"} {
		deadline := time.Now().Add(20 * time.Second)
		for {
			_, err := mb.query(ch, 300*time.Millisecond)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("query %s: %v", ch, err)
			}
		}
	}
	return mb
}

func (mb *mlpBench) query(channel string, timeout time.Duration) (*task.QueryResponse, error) {
	res, err := mb.prod.Query(context.Background(), channel, mb.body, nil, timeout)
	if err != nil {
		return nil, err
	}
	resp, err := task.ParseQueryResponse(res.Body)
	if err != nil {
		return nil, err
	}
	if resp.Status != task.StatusSuccess {
		return nil, fmt.Errorf("query %s: %s", channel, resp.Error)
	}
	return resp, nil
}

// reportLatency reports p50 and p99 of lat in ms.
func reportLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	at := func(q float64) float64 {
		return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.50), "p50_ms")
	b.ReportMetric(at(0.99), "p99_ms")
}

// BenchmarkQueryRoundTrip is one caller at a time: the broker's own query
// round trip (echo) and mlp's, with the batcher's max_queue_delay of the
// embedded config (1 ms) and without one.
func BenchmarkQueryRoundTrip(b *testing.B) {
	for _, delay := range []time.Duration{time.Millisecond, 0} {
		b.Run(fmt.Sprintf("delay=%v", delay), func(b *testing.B) {
			mb := newMLPBench(b, delay)
			for _, ch := range []string{"echo", "inferq.mlp"} {
				b.Run(strings.TrimPrefix(ch, "inferq."), func(b *testing.B) {
					lat := make([]time.Duration, 0, b.N)
					for b.Loop() {
						t0 := time.Now()
						if _, err := mb.query(ch, 5*time.Second); err != nil {
							b.Fatal(err)
						}
						lat = append(lat, time.Since(t0))
					}
					reportLatency(b, lat)
				})
			}
		})
	}
}

// parallel runs f b.N times from callers goroutines and reports the rate.
func parallel(b *testing.B, callers int, f func() error) {
	var n atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	start := time.Now()
	for range callers {
		wg.Go(func() {
			for n.Add(1) <= int64(b.N) {
				if err := f(); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
}

// BenchmarkQueryParallel is 8 concurrent callers of mlp queries.
func BenchmarkQueryParallel(b *testing.B) {
	for _, delay := range []time.Duration{time.Millisecond, 0} {
		b.Run(fmt.Sprintf("delay=%v", delay), func(b *testing.B) {
			mb := newMLPBench(b, delay)
			b.ResetTimer()
			parallel(b, 8, func() error { _, err := mb.query("inferq.mlp", 10*time.Second); return err })
		})
	}
}

// BenchmarkOIPHTTP is mlp over POST /v2/models/mlp/infer (JSON), one
// caller and 8 concurrent ones.
func BenchmarkOIPHTTP(b *testing.B) {
	for _, delay := range []time.Duration{time.Millisecond, 0} {
		b.Run(fmt.Sprintf("delay=%v", delay), func(b *testing.B) { benchOIP(b, newMLPBench(b, delay)) })
	}
}

func benchOIP(b *testing.B, mb *mlpBench) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	post := func() error {
		resp, err := client.Post(mb.url+"/v2/models/mlp/infer", "application/json", bytes.NewReader(mb.oip))
		if err != nil {
			return err
		}
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", resp.Status, buf.Bytes())
		}
		return nil
	}
	b.Run("1", func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			t0 := time.Now()
			if err := post(); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		reportLatency(b, lat)
	})
	b.Run("8", func(b *testing.B) { parallel(b, 8, post) })
}
