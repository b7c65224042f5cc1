package consumer_test

import (
	"bufio"
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/task"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// lockedBuffer collects log output from many goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b.buf.Bytes()))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// A task whose id, reply_to or dead letter queue must not name anything
// goes once to the unprocessable queue with the reason: it never runs, no
// record is stored under its id, nothing is sent to a channel named after
// it. (Embedded broker only: names like these damage a real one, trap 19.)
func TestBadNamesGoToUnprocessable(t *testing.T) {
	huge := strings.Repeat("a", 9<<19) // 4.5 MiB
	for _, tc := range []struct {
		name  string
		id    string
		body  string // a raw body instead of the task the id makes
		msgID string // the message's id (producer-chosen too)
		opts  []task.Option
		dlq   string // the message's MaxReceiveQueue
		want  string // in the error tag
	}{
		{name: "newline id", id: "x\nC victim 50", want: `task_id "x\nC victim 50" has "\n"`},
		{name: "space id", id: "a b", want: `task_id "a b" has " "`},
		{name: "wildcard id", id: "a.*", want: `task_id "a.*" has "*"`},
		{name: "routing id", id: "x;queues:victim", want: `task_id "x;queues:victim" has ";"`},
		{name: "trailing dot id", id: "abc.", want: "ends with '.'"},
		{name: "invalid UTF-8 id", id: "a\xffb", body: `{"task_id":"a` + "\xff" + `b","task_name":"m","args":[[1,1,0,0]]}`, want: `task_id "a\xffb" has "\xff" at byte 1`},
		{name: "4.5 MiB id", id: huge, msgID: "m-" + huge, want: "task_id \"" + strings.Repeat("a", 40) + "\"... is 4718592 bytes, over the limit of 256"},
		{name: "newline reply_to", id: "t1", opts: []task.Option{task.WithReplyTo("replies\nPUB x")}, want: `reply_to "replies\nPUB x" has "\n"`},
		{name: "routing dead letter queue", id: "t1", dlq: "dlq;queues:victim", want: `dead letter queue (MaxReceiveQueue) "dlq;queues:victim" has ";"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs lockedBuffer
			h := newHarness(t, func(c *harnessConfig) {
				c.configure = func(cc *consumer.Config) {
					cc.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
				}
			})
			m := h.taskMsg(tc.id, testModel, 1, 1, tc.opts...)
			if tc.body != "" {
				m = mq.OutMessage{Channel: h.q, Body: []byte(tc.body)}
			}
			m.ID = tc.msgID
			if tc.dlq != "" {
				m.MaxReceiveCount, m.MaxReceiveQueue = 5, tc.dlq
			}
			h.sendMsg(m)
			unp := h.q + ".unprocessable"
			waitFor(t, 10*time.Second, "the unprocessable queue", func() bool { return len(h.queueMsgs(unp)) == 1 })
			h.settled(h.q)
			got := h.queueMsgs(unp)[0]
			if why := got.Tags[mq.TagError]; !strings.Contains(why, tc.want) || len(why) > 400 {
				t.Errorf("error tag %.500q, want one saying %q", why, tc.want)
			}
			if !bytes.Equal(got.Body, m.Body) || got.Tags[mq.TagOrigin] != h.q {
				t.Errorf("forwarded %d bytes with tags origin %q", len(got.Body), got.Tags[mq.TagOrigin])
			}
			if n := h.fake.Total.Load(); n != 0 {
				t.Errorf("ran %d times", n)
			}
			if _, ok := h.store.Get(tc.id); ok {
				t.Error("a record was stored under the refused id")
			}
			if n := testutil.ToFloat64(h.met.Unprocessable); n != 1 {
				t.Errorf("inferq_unprocessable_total %v, want 1", n)
			}
			h.records.Range(func(k, _ any) bool {
				t.Errorf("a record reached the reply channel for %.40q", k)
				return true
			})
			if n := len(h.queueMsgs(unp)); n != 1 {
				t.Errorf("%d messages in the unprocessable queue, want 1", n)
			}
			lines := logs.lines()
			if len(lines) == 0 {
				t.Error("nothing logged")
			}
			for _, l := range lines {
				if len(l) > 4096 {
					t.Errorf("log line of %d bytes: %.300s", len(l), l)
				}
			}
		})
	}
}
