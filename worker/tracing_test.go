package worker

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
)

// The exporter is on only when the standard variables ask for it. The
// variables are set in the process: autoexport and the OTLP exporters
// read them there.
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
		{"exporter console", map[string]string{"OTEL_TRACES_EXPORTER": "console"}, true, false},
		{"exporter none", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, false, false},
		{"sdk disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, false, false},
		{"other exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, true},
		{"other protocol", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, false, true},
		{"traces protocol differs", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, false, true},
		{"traces protocol same", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
				"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SDK_DISABLED", "OTEL_SERVICE_NAME"} {
				t.Setenv(k, tc.env[k])
			}
			tp, stop, err := TracerProvider(context.Background(), os.Getenv, slog.New(slog.DiscardHandler))
			defer stop()
			if (err != nil) != tc.err || (tp != nil) != tc.on {
				t.Fatalf("provider %v, err %v; want on %v, error %v", tp, err, tc.on, tc.err)
			}
			var ee *EnvError
			if err != nil && !errors.As(err, &ee) {
				t.Errorf("error %v is not an *EnvError", err)
			}
		})
	}
}
