package worker

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// EnvError is an OTEL_* setting that inferq cannot use: the user's to fix.
type EnvError struct{ Msg string }

func (e *EnvError) Error() string { return e.Msg }

// TracerProvider returns a tracer provider exporting spans when the
// standard OTEL_* variables ask for it, else nil (tracing off, no cost).
// getenv reads the variables.
//
// On: OTEL_TRACES_EXPORTER set (otlp, console), or an OTLP endpoint set
// (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT),
// unless OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none. The exporter
// is chosen by go.opentelemetry.io/contrib/exporters/autoexport (protocol
// from OTEL_EXPORTER_OTLP_PROTOCOL: http/protobuf by default, or grpc);
// the exporter, the batch processor and the sampler read their other
// OTEL_* settings from the process environment themselves. autoexport
// v0.51.0, the last release on grpc v1.63, does not read
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: a value that differs from the
// generic protocol is refused rather than ignored. Configuration errors
// are *EnvError. stop flushes the spans.
func TracerProvider(ctx context.Context, getenv func(string) string, log *slog.Logger) (tp trace.TracerProvider, stop func(), err error) {
	stop = func() {}
	on, proto, err := tracingWanted(getenv)
	if !on || err != nil {
		return nil, stop, err
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, stop, &EnvError{Msg: fmt.Sprintf("tracing: %v", err)}
	}
	res := resource.Default()
	if getenv("OTEL_SERVICE_NAME") == "" {
		res, _ = resource.Merge(res, resource.NewSchemaless(attribute.String("service.name", "inferq")))
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	endpoint := cmp.Or(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), "default")
	log.Info("tracing: exporting spans", "exporter", cmp.Or(getenv("OTEL_TRACES_EXPORTER"), "otlp"), "protocol", proto, "endpoint", endpoint)
	return sdk, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := sdk.Shutdown(sctx); err != nil {
			log.Warn("tracing: flushing spans failed", "err", err)
		}
	}, nil
}

// tracingWanted reads the on/off switch and the OTLP protocol.
func tracingWanted(getenv func(string) string) (on bool, proto string, err error) {
	exporter := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	endpoint := cmp.Or(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	switch {
	case strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true"), exporter == "none":
		return false, "", nil
	case exporter == "" && endpoint == "":
		return false, "", nil
	}
	proto = cmp.Or(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), "http/protobuf")
	if tp := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"); tp != "" && tp != proto {
		return false, "", &EnvError{Msg: fmt.Sprintf("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=%q differs from OTEL_EXPORTER_OTLP_PROTOCOL (%q): set OTEL_EXPORTER_OTLP_PROTOCOL instead; inferq's exporter (autoexport v0.51.0) reads only that one", tp, proto)}
	}
	return true, proto, nil
}
