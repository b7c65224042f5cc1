package logclip_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/inferq/inferq/logclip"
)

func TestString(t *testing.T) {
	huge := strings.Repeat("a", 9<<19) // 4.5 MiB
	for _, tc := range []struct {
		name, in, want string
	}{
		{"short", "t-1", "t-1"},
		{"at the limit", strings.Repeat("b", logclip.MaxBytes), strings.Repeat("b", logclip.MaxBytes)},
		{"huge", huge, strings.Repeat("a", logclip.MaxBytes-len("...(4718592 bytes)")) + "...(4718592 bytes)"},
		{"newline", "x\nC victim 50", `x\nC victim 50`},
		{"controls", "a\x00b\tc\x7fd\re", `a\x00b\tc\x7fd\re`},
		{"invalid UTF-8", "a\xffb", `a\xffb`},
		{"unicode kept", "tâche ✓", "tâche ✓"},
		{"bidi override escaped", "a\u202eb", `a\u202eb`},
		{"escapes count against the limit", strings.Repeat("\n", 300), strings.Repeat(`\n`, (logclip.MaxBytes-len("...(300 bytes)"))/2) + "...(300 bytes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := logclip.String(tc.in)
			if got != tc.want {
				t.Fatalf("String(%.60q) = %.80q, want %.80q", tc.in, got, tc.want)
			}
			if len(got) > logclip.MaxBytes {
				t.Errorf("%d bytes, over %d", len(got), logclip.MaxBytes)
			}
			if again := logclip.String(got); again != got {
				t.Errorf("not idempotent: %.80q then %.80q", got, again)
			}
		})
	}
}

// loggable is a LogValuer carrying wire data, like mq.Message.
type loggable struct{ id string }

func (l loggable) LogValue() slog.Value {
	return slog.GroupValue(slog.String("id", l.id), slog.Int("n", 1))
}

type stringer string

func (s stringer) String() string { return string(s) }

// A record carrying a 4.5 MiB id in every form stays one bounded line, for
// both handlers, through With and groups too.
func TestHandlerBoundsLines(t *testing.T) {
	huge := strings.Repeat("x", 9<<19) + "\ninjected=line"
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			var h slog.Handler = slog.NewTextHandler(&buf, nil)
			if format == "json" {
				h = slog.NewJSONHandler(&buf, nil)
			}
			log := logclip.Logger(slog.New(h)).With("with", huge).WithGroup("g")
			log.Warn("store failed "+huge, "task_id", huge, "msg", loggable{huge}, "err", fmt.Errorf("wrapped: %s", huge),
				"stringer", stringer(huge), "bytes", []byte(huge), slog.Group("grp", "reply_to", huge), huge, 1,
				"stack", logclip.Whole("line 1\nline 2"))
			line := buf.String()
			if strings.Count(line, "\n") != 1 || !strings.HasSuffix(line, "\n") {
				t.Fatalf("%d lines: %.300q", strings.Count(line, "\n"), line)
			}
			// 10 clipped values of 256 bytes, one error of 1 KiB, keys.
			if len(line) > 5000 {
				t.Fatalf("line of %d bytes", len(line))
			}
			for _, want := range []string{"...(4718606 bytes)", "line 1", "line 2"} {
				if !strings.Contains(line, want) {
					t.Errorf("line does not carry %q: %.500q", want, line)
				}
			}
			if !utf8.ValidString(line) {
				t.Error("invalid UTF-8 in the line")
			}
		})
	}
}

func TestLoggerWrapsOnce(t *testing.T) {
	var buf bytes.Buffer
	l := logclip.Logger(slog.New(slog.NewTextHandler(&buf, nil)))
	if logclip.Logger(l) != l || logclip.Handler(l.Handler()) != l.Handler() {
		t.Error("a wrapped logger was wrapped again")
	}
	if logclip.Logger(nil) == nil {
		t.Error("nil logger")
	}
	l.Info("m", "err", errors.New(strings.Repeat("e", 2000)))
	if n := strings.Count(buf.String(), "e"); n > logclip.MaxErrorBytes+10 {
		t.Errorf("error text of %d bytes kept", n)
	}
}
