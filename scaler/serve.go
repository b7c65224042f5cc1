package scaler

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	pb "github.com/inferq/inferq/scaler/externalscalerpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Serve serves the Scaler and the standard gRPC health service
// (grpc.health.v1.Health: SERVING for "" and for
// "externalscaler.ExternalScaler", for the kubelet's grpc probes) on lis until ctx ends, then stops gracefully: health turns
// NOT_SERVING, open StreamIsActive streams end, unary calls in flight get
// Config.StopGrace to finish before they are cut. It returns nil after a
// stop asked by ctx, or the listener's error. Serve closes lis. Call it
// once per Scaler.
func (s *Scaler) Serve(ctx context.Context, lis net.Listener) error {
	gs := grpc.NewServer()
	pb.RegisterExternalScalerServer(gs, s)
	hs := health.NewServer()
	hs.SetServingStatus(pb.ExternalScaler_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)

	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	s.log.Info("scaler serving", "addr", lis.Addr().String(), "poll_interval", s.cfg.PollInterval)
	select {
	case err := <-served:
		hs.Shutdown()
		close(s.quit)
		gs.Stop()
		return fmt.Errorf("scaler: serve %s: %w", lis.Addr(), err)
	case <-ctx.Done():
	}
	s.log.Info("scaler stopping", "grace", s.cfg.StopGrace)
	hs.Shutdown() // NOT_SERVING from now on
	close(s.quit) // StreamIsActive streams return
	stopped := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(stopped)
	}()
	t := time.NewTimer(s.cfg.StopGrace)
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
		// A health Watch stream, or a unary call stuck past its
		// CallTimeout, would hold GracefulStop for good.
		gs.Stop()
		<-stopped
	}
	if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("scaler: serve %s: %w", lis.Addr(), err)
	}
	return nil
}
