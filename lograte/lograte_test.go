package lograte

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

func newTest(every time.Duration) (*Limiter, *bytes.Buffer, *time.Time) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	l := New(log, every)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	return l, &buf, &now
}

func lines(buf *bytes.Buffer) []string {
	s := strings.TrimSpace(buf.String())
	buf.Reset()
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func TestLimiter(t *testing.T) {
	l, buf, now := newTest(time.Minute)
	steps := []struct {
		advance time.Duration
		msg     string
		want    string // "" when dropped
	}{
		{0, "broker down", `level=WARN msg="broker down" n=0`},
		{time.Second, "broker down", ""},
		{time.Second, "other event", `level=WARN msg="other event" n=2`},
		{time.Second, "broker down", ""},
		{time.Minute, "broker down", `level=WARN msg="broker down" n=4 repeated=2`},
		{time.Minute, "broker down", `level=WARN msg="broker down" n=5`},
	}
	for i, s := range steps {
		*now = now.Add(s.advance)
		l.Warn(s.msg, "n", i)
		got := lines(buf)
		switch {
		case s.want == "" && len(got) != 0:
			t.Errorf("step %d: logged %q, want it dropped", i, got)
		case s.want != "" && (len(got) != 1 || got[0] != s.want):
			t.Errorf("step %d: logged %q, want %q", i, got, s.want)
		}
	}
}

func TestLimiterReset(t *testing.T) {
	l, buf, _ := newTest(time.Hour)
	l.Info("stream lost")
	l.Info("stream lost")
	l.Reset("stream lost")
	l.Info("stream lost")
	if got := lines(buf); len(got) != 2 {
		t.Errorf("logged %q, want the first record and the one after Reset", got)
	}
}

func TestLimiterConcurrent(t *testing.T) {
	l, buf, _ := newTest(time.Hour)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				l.Warn("retrying")
			}
		}()
	}
	wg.Wait()
	if got := lines(buf); len(got) != 1 {
		t.Errorf("logged %d records of 800, want 1", len(got))
	}
}

func TestLimiterDisabledLevel(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError})), time.Hour)
	l.Warn("below the level")
	if buf.Len() != 0 {
		t.Errorf("logged %q below the handler's level", buf.String())
	}
	New(nil, 0).Warn("discarded") // a nil logger is fine
}
