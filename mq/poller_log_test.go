package mq

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestPollerEventsHaveOneOwner: a broker state change and a settlement
// failure are logged by the callback that receives them; the Poller logs
// them itself only when that callback is nil, and a settlement failure that
// repeats is logged once per LogRepeatEvery with its count.
func TestPollerEventsHaveOneOwner(t *testing.T) {
	errDown := errors.New("broker gone")
	for _, withCallbacks := range []bool{true, false} {
		var buf bytes.Buffer
		c := &Conn{log: slog.New(slog.NewTextHandler(&buf, nil)), cfg: Config{LogRepeatEvery: time.Hour}}
		var states, settles int
		cfg := PollerConfig{Channel: "q", Deliver: func(_ context.Context, b []*Message) error { return nil }}
		if withCallbacks {
			cfg.OnState = func(bool, error) { states++ }
			cfg.OnSettleError = func(error) { settles++ }
		}
		p, err := c.NewPoller(cfg)
		if err != nil {
			t.Fatal(err)
		}
		p.setState(true, nil)
		p.setState(false, errDown)
		p.setState(false, errDown) // no change: no event
		for range 5 {
			p.settleFailed(errDown)
		}
		logs := buf.String()
		count := func(msg string) int { return strings.Count(logs, `msg="`+msg+`"`) }
		if withCallbacks {
			if states != 2 || settles != 5 || logs != "" {
				t.Errorf("with callbacks: %d states, %d settle errors, logs %q; want 2, 5 and no logs", states, settles, logs)
			}
			continue
		}
		if count("mq poller broker up") != 1 || count("mq poller broker down") != 1 || count("mq settle failed") != 1 {
			t.Errorf("without callbacks: logs %q; want one up, one down, one settle failure", logs)
		}
		if got := p.Stats().SettleErrors; got != 5 {
			t.Errorf("settle errors counted %d, want 5", got)
		}
	}
}
