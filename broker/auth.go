package broker

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TLSFiles make the broker serve gRPC over TLS. Cert and Key (PEM) are set
// together; ClientCA (PEM), when set, makes it mutual TLS: every client must
// present a certificate signed by it.
type TLSFiles struct {
	Cert, Key, ClientCA string
}

// Enabled reports whether any file is set.
func (f TLSFiles) Enabled() bool { return f.Cert != "" || f.Key != "" || f.ClientCA != "" }

// Validate reports a half-configured TLS: a key without a certificate, a
// certificate without a key, or a client CA without both.
func (f TLSFiles) Validate() error {
	switch {
	case f.Cert != "" && f.Key == "":
		return errors.New("broker: TLS cert is set but the TLS key is not")
	case f.Key != "" && f.Cert == "":
		return errors.New("broker: TLS key is set but the TLS cert is not")
	case f.ClientCA != "" && f.Cert == "":
		return errors.New("broker: TLS client CA is set but the TLS cert and key are not")
	}
	return nil
}

// config loads the files into a server tls.Config.
func (f TLSFiles) config() (*tls.Config, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("broker: load TLS cert %s and key %s: %w", f.Cert, f.Key, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if f.ClientCA == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(f.ClientCA)
	if err != nil {
		return nil, fmt.Errorf("broker: read TLS client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("broker: TLS client CA %s holds no PEM certificate", f.ClientCA)
	}
	cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	return cfg, nil
}

// ErrAuth is the refusal of a call without the broker's token. Its text
// is KubeMQ's (Error 421); the status code is Unauthenticated.
var ErrAuth = errors.New("Error 421: authentication verification failed, missing or invalid authorization token")

// securityOptions are the gRPC server options for opts' TLS and token.
func securityOptions(opts *Options) ([]grpc.ServerOption, error) {
	var out []grpc.ServerOption
	if opts.TLS.Enabled() {
		cfg, err := opts.TLS.config()
		if err != nil {
			return nil, err
		}
		out = append(out, grpc.Creds(credentials.NewTLS(cfg)))
	}
	if opts.AuthToken != "" {
		a := tokenAuth{token: []byte(opts.AuthToken)}
		out = append(out, grpc.ChainUnaryInterceptor(a.unary), grpc.ChainStreamInterceptor(a.stream))
	}
	return out, nil
}

// tokenAuth refuses every call, Ping included, whose metadata
// "authorization" is not the token (the header kubemq-go and the other
// SDKs send their auth token in, without a "Bearer" prefix).
type tokenAuth struct {
	token []byte
}

func (a tokenAuth) check(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if subtle.ConstantTimeCompare([]byte(v), a.token) == 1 {
			return nil
		}
	}
	return status.Error(codes.Unauthenticated, ErrAuth.Error())
}

func (a tokenAuth) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := a.check(ctx); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (a tokenAuth) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := a.check(ss.Context()); err != nil {
		return err
	}
	return h(srv, ss)
}
