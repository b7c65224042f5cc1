package oip

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"runtime/debug"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A panic in a handler must not take the process down: grpc-go does not
// recover them at all, and net/http logs them only through its own error
// log. Both servers recover here, log the panic and its stack at ERROR and
// answer an internal error; the process goes on serving.

// recoverHTTP answers 500 to a request whose handler panicked. It lets
// http.ErrAbortHandler through: that panic is net/http's way of aborting a
// response on purpose.
func recoverHTTP(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if err, ok := p.(error); ok && errors.Is(err, http.ErrAbortHandler) {
				panic(p)
			}
			log.Error("http handler panicked; answered 500", "method", r.Method, "path", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
			oipError(w, http.StatusInternalServerError, errors.New("internal error: the request's handler failed; see the server's log"))
		}()
		next.ServeHTTP(w, r)
	})
}

// recoverUnary and recoverStream answer INTERNAL to a call whose handler
// panicked.
func recoverUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				log.Error("grpc handler panicked; answered INTERNAL", "method", info.FullMethod, "panic", p, "stack", string(debug.Stack()))
				resp, err = nil, status.Error(codes.Internal, "internal error: the call's handler failed; see the server's log")
			}
		}()
		return handler(ctx, req)
	}
}

func recoverStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if p := recover(); p != nil {
				log.Error("grpc handler panicked; answered INTERNAL", "method", info.FullMethod, "panic", p, "stack", string(debug.Stack()))
				err = status.Error(codes.Internal, "internal error: the call's handler failed; see the server's log")
			}
		}()
		return handler(srv, ss)
	}
}

// logger is l, or one that discards.
func logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}
