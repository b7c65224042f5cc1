package worker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"

	"github.com/inferq/inferq/oip"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// listenGRPC opens the Open Inference Protocol's gRPC listener when
// GRPC.Listen is set: the HTTP endpoint's bearer token, the gRPC section's
// TLS files and concurrency cap, the model repository when there is one.
func (w *Worker) listenGRPC(context.Context) error {
	g := w.cfg.GRPC
	if g.Listen == "" {
		return nil
	}
	token, err := w.cfg.HTTP.Token()
	if err != nil {
		return err
	}
	var opts []grpc.ServerOption
	if g.TLSCert != "" || g.TLSKey != "" {
		cert, err := tls.LoadX509KeyPair(g.TLSCert, g.TLSKey)
		if err != nil {
			return fmt.Errorf("grpc.tls_cert %s, grpc.tls_key %s: %w", g.TLSCert, g.TLSKey, err)
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})))
	}
	lis, err := net.Listen("tcp", g.Listen)
	if err != nil {
		return fmt.Errorf("grpc: listen on %s: %w", g.Listen, err)
	}
	w.glis = lis
	w.gs = oip.NewGRPCServer(w.srv, oip.GRPCConfig{Metrics: w.met, Gatherer: w.cfg.Registry, AuthToken: token,
		MaxConcurrentInfer: g.MaxConcurrentRequests, Repository: w.cfg.Repository, Logger: w.log.With("component", "grpc")}, opts...)
	w.log.Info("grpc listening", "addr", lis.Addr().String(), "tls", len(opts) > 0, "auth", token != "")
	if token == "" && !loopback(lis.Addr()) {
		w.log.Warn("grpc listens beyond loopback without a bearer token: whoever reaches it can run inference; set http.auth_token, http.auth_token_file or INFERQ_HTTP_AUTH_TOKEN",
			"addr", lis.Addr().String())
	}
	return nil
}

// GRPCAddr is the gRPC listener's address, nil without one.
func (w *Worker) GRPCAddr() net.Addr {
	if w.glis == nil {
		return nil
	}
	return w.glis.Addr()
}

func (w *Worker) serveGRPC() error {
	if err := w.gs.Serve(w.glis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("grpc: %w", err)
	}
	return nil
}

// stopGRPC lets the calls in progress finish until ctx ends, then cuts
// the rest.
func (w *Worker) stopGRPC(ctx context.Context) {
	if w.gs == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		w.gs.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		w.gs.Stop()
		<-done
	}
	w.glis = nil // closed by the stop
}
