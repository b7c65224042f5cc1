package main

import (
	"context"
	"log/slog"
	"testing"
)

// The OTLP exporter is on only when the standard variables ask for it.
func TestTracerProviderFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		on   bool
		err  bool
	}{
		{"unset", nil, false, false},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, true, false},
		{"traces endpoint, grpc", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, true, false},
		{"exporter otlp", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, false},
		{"exporter none", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, false, false},
		{"sdk disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, false, false},
		{"other exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, true},
		{"other protocol", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _, _ := testApp(tc.env)
			tp, stop, err := a.tracerProvider(context.Background(), slog.New(slog.DiscardHandler))
			defer stop()
			if (err != nil) != tc.err || (tp != nil) != tc.on {
				t.Fatalf("provider %v, err %v; want on %v, error %v", tp, err, tc.on, tc.err)
			}
		})
	}
}
