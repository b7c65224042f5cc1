package oip_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/consumer/consumertest"
	"github.com/inferq/inferq/oip"
	pb "github.com/inferq/inferq/oip/inferencepb"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// panicRepo is a model repository whose Load panics, as a loader bug
// would.
type panicRepo struct{ fakeRepo }

func (*panicRepo) Load(context.Context, string) error { panic("loader bug") }

// A handler that panics answers an internal error, the panic is logged at
// ERROR, and the process goes on serving: over gRPC (grpc-go recovers
// nothing, so a panicking RepositoryModelLoad killed the process) and
// over HTTP.
func TestHandlersRecoverPanics(t *testing.T) {
	var logs consumertest.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	met, err := consumer.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	cons := consumertest.Offline(t, consumer.Config{Metrics: met,
		Models: []consumer.Model{{Config: consumertest.Model(), Info: consumertest.FakeInfo, Batcher: consumertest.NewFakeBatcher()}}})

	c := serveGRPC(t, cons, oip.GRPCConfig{Metrics: met, Repository: &panicRepo{}, Logger: log})()
	_, err = c.RepositoryModelLoad(callCtx(t), &pb.RepositoryModelLoadRequest{ModelName: "m"})
	if status.Code(err) != codes.Internal {
		t.Errorf("load through a panicking repository: %v, want INTERNAL", err)
	}
	if live, err := c.ServerLive(callCtx(t), &pb.ServerLiveRequest{}); err != nil || !live.Live {
		t.Errorf("after the panic: live %v, %v", live, err)
	}

	hs := httptest.NewServer(oip.Handler(cons, oip.HTTPConfig{Metrics: met, Logger: log, Routes: map[string]http.Handler{
		"GET /boom": http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("handler bug") }),
	}}))
	t.Cleanup(hs.Close)
	resp, body := consumertest.Do(t, "GET", hs.URL+"/boom", nil, nil)
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), `"error"`) {
		t.Errorf("a panicking route: %d %s, want 500 with a JSON error", resp.StatusCode, body)
	}
	if resp, _ := consumertest.Do(t, "GET", hs.URL+"/healthz", nil, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("after the panic: /healthz %d", resp.StatusCode)
	}
	for _, want := range []string{"level=ERROR msg=\"grpc handler panicked", "loader bug", "level=ERROR msg=\"http handler panicked", "handler bug"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, logs.String())
		}
	}
}
