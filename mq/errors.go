package mq

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors. Every error this package returns for a broker failure
// wraps one of them (test with errors.Is) together with the SDK's own error,
// and names the operation that failed.
var (
	// ErrUnavailable means the broker is away, a stream was lost or a
	// call found no connection (gRPC Unavailable, or the SDK's text errors
	// such as "kubemq grpc client connection lost"). It is retryable:
	// streams come back 1-3 s after the broker does (KUBEMQ.md trap 9).
	ErrUnavailable = errors.New("mq: broker unavailable")
	// ErrTooLarge means the broker or gRPC refused a message for its size
	// (ResourceExhausted), or Send refused it locally before it could tear
	// the upstream stream down (trap 10).
	ErrTooLarge = errors.New("mq: message too large")
	// ErrUnauthorized means the broker refused the connection's
	// credentials (gRPC Unauthenticated or PermissionDenied, KubeMQ's
	// "Error 421: authentication verification failed"). Retrying with the
	// same token cannot help.
	ErrUnauthorized = errors.New("mq: broker refused the credentials")
	// ErrClosed means the Conn, Sender or Poller was closed.
	ErrClosed = errors.New("mq: closed")
	// ErrTimeout means a query found no responder in its timeout (the
	// broker's "Error 301: timeout for request").
	ErrTimeout = errors.New("mq: request timeout")
	// ErrAlreadySettled is returned by a second Ack, NAck or ReQueue of one
	// Message; nothing is sent to the broker (trap 6: the SDK fails a
	// second settlement only later, through OnErrorFunc).
	ErrAlreadySettled = errors.New("mq: message already settled")
	// ErrNotSettleable is returned when settling a Message that did not
	// come from a Poller (for example one returned by Peek).
	ErrNotSettleable = errors.New("mq: message was not polled")
	// ErrRefused means the broker refused a request for what it names: a
	// channel name it does not take (a space, '*', '>', a trailing '.',
	// empty: "Error 120: invalid queue name value", Errors 102, 107, 108,
	// 119 on events; KUBEMQ.md trap 19). The same request is refused
	// again: it is permanent, never a reason to retry.
	ErrRefused = errors.New("mq: refused by the broker")
)

// classify turns an error of the SDK or gRPC into one of the sentinels
// above, wrapped with op, or wraps it with op alone. Context errors of the
// caller stay recognisable with errors.Is(err, context.Canceled).
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	if kind := kindOf(err); kind != nil {
		if errors.Is(err, kind) {
			return fmt.Errorf("%s: %w", op, err)
		}
		return fmt.Errorf("%s: %w: %w", op, kind, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// kindOf returns the sentinel err belongs to, or nil.
func kindOf(err error) error {
	for _, s := range []error{ErrUnavailable, ErrUnauthorized, ErrTooLarge, ErrClosed, ErrTimeout, ErrAlreadySettled, ErrNotSettleable, ErrRefused} {
		if errors.Is(err, s) {
			return s
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.OK && st.Code() != codes.Unknown {
		switch st.Code() {
		case codes.Unavailable, codes.Aborted:
			return ErrUnavailable
		case codes.ResourceExhausted:
			return ErrTooLarge
		case codes.Unauthenticated, codes.PermissionDenied:
			return ErrUnauthorized
		case codes.Canceled, codes.DeadlineExceeded:
			return nil
		}
		return textKind(st.Message())
	}
	return textKind(err.Error())
}

// textKind classifies the SDK's plain-string errors (trap 9).
func textKind(msg string) error {
	m := strings.ToLower(msg)
	switch {
	case strings.Contains(m, "error 301"), strings.Contains(m, "timeout for request"):
		return ErrTimeout
	case strings.Contains(m, "error 421"), strings.Contains(m, "authentication verification failed"):
		return ErrUnauthorized
	case refusedName(m):
		return ErrRefused
	case strings.Contains(m, "resourceexhausted"), strings.Contains(m, "larger than max"),
		strings.Contains(m, "message too large"):
		return ErrTooLarge
	case strings.Contains(m, "connection lost"), // qs: "kubemq grpc client connection lost, can't ..."
		strings.Contains(m, "grpcclient connection error"), // qs poll: stream error while waiting
		strings.Contains(m, "timout waiting response"),     // qs poll: no answer in WaitTimeout+1s
		strings.Contains(m, "sending poll request timout"), // qs poll: stream not draining requests
		strings.Contains(m, "request send timeout"),        // qs ack: stream not draining requests
		strings.Contains(m, "transaction is not ready"),    // qs ack: the poll's stream was lost
		strings.Contains(m, "connection closed locally"),
		strings.Contains(m, "code = unavailable"),
		strings.Contains(m, "transport is closing"),
		strings.Contains(m, "error reading from server"),
		strings.Contains(m, "connection refused"),
		strings.Contains(m, "connection reset"),
		strings.Contains(m, "broken pipe"),
		m == "eof":
		return ErrUnavailable
	}
	return nil
}

// refusedName reports whether m (lower case) is the broker's refusal of a
// channel name: its in-band texts, which come back as a send result, a
// stream error or a gRPC status message.
func refusedName(m string) bool {
	for _, code := range []string{
		"error 102:", // invalid channel value, cannot be empty
		"error 107:", // no wildcards are allowed
		"error 108:", // no white spaces are allowed
		"error 119:", // cannot end with `.`
		"error 120:", // invalid queue name value
	} {
		if strings.Contains(m, code) {
			return true
		}
	}
	return strings.Contains(m, "invalid queue name") || strings.Contains(m, "invalid channel value")
}

// BatchError reports the per-message outcome of a multi-message Send:
// Errs[i] is the error of the i-th message, nil for those that were stored.
type BatchError struct {
	Errs []error
}

// Error summarises the failures.
func (e *BatchError) Error() string {
	n, first := 0, error(nil)
	for _, err := range e.Errs {
		if err != nil {
			if first == nil {
				first = err
			}
			n++
		}
	}
	return fmt.Sprintf("mq: %d of %d messages not sent, first: %v", n, len(e.Errs), first)
}

// Unwrap exposes the failures to errors.Is and errors.As.
func (e *BatchError) Unwrap() []error {
	var out []error
	for _, err := range e.Errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}
