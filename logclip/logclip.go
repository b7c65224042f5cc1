// Package logclip bounds what a log record carries from wire data. Task ids,
// message ids, tags and error texts that quote bodies are producer data: a
// task id of 4.5 MiB once made every log line about its task 9.4 MB long,
// and a newline in one could forge a line in a log reader that does not
// quote. A Handler clips every string value of a record to MaxBytes (errors
// to MaxErrorBytes), marking the cut with "...(N bytes)", and escapes
// control characters and invalid UTF-8, so a record stays one bounded line
// whatever its handler.
package logclip

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"unicode/utf8"
)

// Limits of one value, in bytes, the "...(N bytes)" mark included.
const (
	// MaxBytes bounds a string value (an id, a tag, a channel name).
	MaxBytes = 256
	// MaxErrorBytes bounds the text of an error value, which carries the
	// context of what failed.
	MaxErrorBytes = 1024
)

// String returns s as a log value clipped to MaxBytes. Safe for concurrent
// use.
func String(s string) string { return clip(s, MaxBytes) }

// Whole is a string value a Handler does not clip (its control characters
// are still escaped): text of the process's own making that must stay
// whole, such as a stack trace.
type Whole string

// clip returns s when it is at most limit bytes of printable text;
// otherwise s with its control characters, other unprintable runes and
// invalid bytes escaped Go-style (\n, \x00, \u202e), cut to at most limit
// bytes in all and marked "...(N bytes)" (N: the length of s) when cut.
// limit < 0 means no cut. Applying it twice changes nothing.
func clip(s string, limit int) string {
	if (limit < 0 || len(s) <= limit) && printableASCII(s) {
		return s
	}
	out, done := escape(s, limit)
	if done {
		return string(out)
	}
	mark := "...(" + strconv.Itoa(len(s)) + " bytes)"
	out, _ = escape(s, limit-len(mark))
	return string(out) + mark
}

// escape escapes s while the result stays within limit bytes (limit < 0:
// no bound); done reports that all of s fit.
func escape(s string, limit int) (out []byte, done bool) {
	out = make([]byte, 0, min(len(s), max(limit, 0))+8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		var piece string
		switch {
		case r == utf8.RuneError && size == 1:
			piece = `\x` + strconv.FormatUint(uint64(s[i])|0x100, 16)[1:]
		case strconv.IsPrint(r):
			piece = s[i : i+size]
		default:
			q := strconv.QuoteRune(r)
			piece = q[1 : len(q)-1]
		}
		if limit >= 0 && len(out)+len(piece) > limit {
			return out, false
		}
		out = append(out, piece...)
		i += size
	}
	return out, true
}

// printableASCII reports whether s is all printable ASCII.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// Handler wraps h so that every record it passes on is clipped: the
// message, every attribute key and string value (in groups too, after
// resolving LogValuers; errors and fmt.Stringers by their text). A handler
// already wrapped is returned as it is. The result is safe for concurrent
// use when h is.
func Handler(h slog.Handler) slog.Handler {
	if c, ok := h.(handler); ok {
		return c
	}
	return handler{h}
}

// Logger returns l with its handler wrapped by Handler (l itself when it is
// already wrapped); a nil l gives a logger that discards.
func Logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	if _, ok := l.Handler().(handler); ok {
		return l
	}
	return slog.New(handler{l.Handler()})
}

type handler struct{ h slog.Handler }

func (c handler) Enabled(ctx context.Context, l slog.Level) bool { return c.h.Enabled(ctx, l) }

func (c handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, String(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(clipAttr(a))
		return true
	})
	return c.h.Handle(ctx, out)
}

func (c handler) WithAttrs(as []slog.Attr) slog.Handler {
	return handler{c.h.WithAttrs(clipAttrs(as))}
}

func (c handler) WithGroup(name string) slog.Handler {
	return handler{c.h.WithGroup(String(name))}
}

func clipAttrs(as []slog.Attr) []slog.Attr {
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = clipAttr(a)
	}
	return out
}

func clipAttr(a slog.Attr) slog.Attr {
	a.Key = String(a.Key)
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		v = slog.StringValue(String(v.String()))
	case slog.KindGroup:
		v = slog.GroupValue(clipAttrs(v.Group())...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case Whole:
			v = slog.StringValue(clip(string(x), -1))
		case error:
			v = slog.StringValue(clip(x.Error(), MaxErrorBytes))
		case fmt.Stringer:
			v = slog.StringValue(String(x.String()))
		case []byte:
			v = slog.StringValue(String(string(x)))
		}
	}
	a.Value = v
	return a
}
