package mq

import (
	"context"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
)

// TakeHead removes the oldest message only when take accepts that very
// message: a refused head stays, an accepted one goes (and only it), and a
// message that differs from the one peeked (take accepts the peek and
// refuses the message received) is written back, at the tail, instead of
// being consumed.
func TestTakeHead(t *testing.T) {
	for _, tg := range targets(t, broker.Options{SecondLength: 50 * time.Millisecond}) {
		t.Run(tg.name, func(t *testing.T) {
			c := dial(t, tg)
			ctx := context.Background()
			ch := chanName(t)
			second := 50 * time.Millisecond
			if tg.srv == nil {
				second = time.Second
			}
			body := func(m *Message) string {
				if m == nil {
					return "<none>"
				}
				return string(m.Body)
			}
			waiting := func() []string {
				t.Helper()
				msgs, err := c.Peek(ctx, ch, 10, second)
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, m := range msgs {
					out = append(out, string(m.Body))
				}
				return out
			}
			takeAll := func(*Message) bool { return true }

			if m, took, err := c.TakeHead(ctx, ch, second, takeAll); err != nil || m != nil || took {
				t.Fatalf("empty channel: %s %v %v, want nothing", body(m), took, err)
			}
			if err := c.Sender().Send(ctx, OutMessage{Channel: ch, Body: []byte("a")}, OutMessage{Channel: ch, Body: []byte("b")}); err != nil {
				t.Fatal(err)
			}
			refuse := func(*Message) bool { return false }
			if m, took, err := c.TakeHead(ctx, ch, second, refuse); err != nil || body(m) != "a" || took {
				t.Fatalf("refused head: %s %v %v, want a left", body(m), took, err)
			}
			if got := waiting(); len(got) != 2 || got[0] != "a" {
				t.Fatalf("after a refused head the channel holds %v, want [a b]", got)
			}
			// Accepted at the peek, refused once received: it goes back.
			calls := 0
			changed := func(*Message) bool { calls++; return calls == 1 }
			if m, took, err := c.TakeHead(ctx, ch, second, changed); err != nil || body(m) != "a" || took || calls != 2 {
				t.Fatalf("head refused once received: %s %v %v (take asked %d times), want a given back", body(m), took, err, calls)
			}
			got := waiting()
			if len(got) != 2 || !(got[0] == "b" && got[1] == "a") {
				t.Fatalf("after a given-back head the channel holds %v, want [b a] (back at the tail)", got)
			}
			if m, took, err := c.TakeHead(ctx, ch, second, takeAll); err != nil || body(m) != "b" || !took {
				t.Fatalf("accepted head: %s %v %v, want b removed", body(m), took, err)
			}
			if got := waiting(); len(got) != 1 || got[0] != "a" {
				t.Fatalf("after removing the head the channel holds %v, want [a]", got)
			}
			m, took, err := c.TakeHead(ctx, ch, second, func(m *Message) bool { return m.ReceiveCount <= 2 })
			if err != nil || body(m) != "a" || !took {
				t.Fatalf("last head: %s %v %v, want a removed", body(m), took, err)
			}
			if got := waiting(); len(got) != 0 {
				t.Fatalf("the channel holds %v, want nothing", got)
			}
		})
	}
}
