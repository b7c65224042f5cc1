package mq

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// A message over the sender's limit cannot be sent again whole: SendCopy
// (and SendDeadLetter) send it by reference (the first RefBytes of body and
// metadata, tags cut, what was cut and the original sizes in tags) and ack
// it; SendRetry, which needs the whole task, refuses it with ErrTooLarge and
// leaves it unsettled. A message within the limit is forwarded whole.
func TestForwardByReference(t *testing.T) {
	tg := targets(t, fastBroker())[0]
	prod := dial(t, tg)
	const limit = 8 << 10
	c, err := Dial(context.Background(), Config{Address: tg.addr, ClientID: "mqtest-small", MaxMessageBytes: limit,
		RetryMin: 20 * time.Millisecond, RetryMax: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ch, dlq := chanName(t), chanName(t)+".dlq"
	msgs := make(chan *Message, 10)
	deliver := func(ctx context.Context, batch []*Message) error {
		for _, m := range batch {
			msgs <- m
		}
		return nil
	}
	runPoller(t, c, PollerConfig{Channel: ch, Deliver: deliver})
	runPoller(t, c, PollerConfig{Channel: dlq, Deliver: deliver})
	next := func() *Message {
		t.Helper()
		select {
		case m := <-msgs:
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("no message")
			return nil
		}
	}

	body := bytes.Repeat([]byte("0123456789abcdef"), 20<<10/16)
	meta := strings.Repeat("é", 1500) // 3000 bytes, cut inside no rune
	long := strings.Repeat("v", 2000)
	big := OutMessage{Channel: ch, Body: body, Metadata: meta, Tags: map[string]string{"task_id": "1", "long": long},
		MaxReceiveCount: 3, MaxReceiveQueue: dlq}
	if err := prod.Sender().Send(context.Background(), big); err != nil {
		t.Fatal(err)
	}
	m := next()
	if err := c.Sender().SendRetry(context.Background(), m, time.Second, 2); !errors.Is(err, ErrTooLarge) || m.Settled() {
		t.Fatalf("retry of a message over the limit: %v (settled %v), want ErrTooLarge and unsettled", err, m.Settled())
	}
	if err := c.Sender().SendDeadLetter(context.Background(), m, dlq, "boom", 3); err != nil {
		t.Fatalf("dead letter by reference: %v", err)
	}
	if m.Settled() {
		t.Error("SendDeadLetter settled the original: that is its caller's (the consumer's settle)")
	}
	if err := m.Ack(); err != nil {
		t.Fatal(err)
	}
	d := next()
	if !bytes.Equal(d.Body, body[:RefBytes]) {
		t.Errorf("body: %d bytes, want the first %d", len(d.Body), RefBytes)
	}
	if !utf8.ValidString(d.Metadata) || len(d.Metadata) > RefBytes || len(d.Metadata) < RefBytes-4 || !strings.HasPrefix(meta, d.Metadata) {
		t.Errorf("metadata: %d bytes, want a valid UTF-8 prefix of at most %d", len(d.Metadata), RefBytes)
	}
	want := map[string]string{
		"task_id": "1", "long": long[:RefBytes],
		TagError: "boom", TagAttempts: "3", TagOrigin: ch,
		TagTruncated: "body,metadata,tags", TagOriginalBytes: strconv.Itoa(len(body)), TagOriginalMetadataBytes: strconv.Itoa(len(meta)),
	}
	for k, v := range want {
		if d.Tags[k] != v {
			t.Errorf("tag %s = %.40q, want %.40q", k, d.Tags[k], v)
		}
	}
	if d.MaxReceiveQueue != "" {
		t.Errorf("the copy kept the receive policy: MaxReceiveQueue %q", d.MaxReceiveQueue)
	}
	_ = d.Ack()

	small := OutMessage{Channel: ch, Body: []byte("small"), Tags: map[string]string{"task_id": "2"}}
	if err := prod.Sender().Send(context.Background(), small); err != nil {
		t.Fatal(err)
	}
	m = next()
	if err := c.Sender().SendCopy(context.Background(), m, dlq, map[string]string{TagError: "bad"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Ack(); err != nil {
		t.Fatal(err)
	}
	d = next()
	if string(d.Body) != "small" || d.Tags["task_id"] != "2" || d.Tags[TagError] != "bad" || d.Tags[TagTruncated] != "" {
		t.Errorf("forwarded whole: body %q tags %v", d.Body, d.Tags)
	}
	_ = d.Ack()
}

// The sender's limits count tags, and cannot exceed what one gRPC message
// holds (trap 10): Validate says which field is over.
func TestSendLimits(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{MaxMessageBytes: 100 << 20}, "MaxMessageBytes"},
		{Config{SendBatchBytes: 100 << 20}, "SendBatchBytes"},
	} {
		tc.cfg.Address = "127.0.0.1:1"
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
	ok := Config{Address: "127.0.0.1:1", MaxMessageBytes: 64 << 20}
	if err := ok.Validate(); err != nil || ok.SendBatchBytes < ok.MaxMessageBytes {
		t.Errorf("64 MiB: %v, SendBatchBytes %d", err, ok.SendBatchBytes)
	}

	tg := targets(t, fastBroker())[0]
	c, err := Dial(context.Background(), Config{Address: tg.addr, MaxMessageBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tags := map[string]string{"k": strings.Repeat("v", 1000)}
	if err := c.Sender().Send(context.Background(), OutMessage{Channel: chanName(t), Body: []byte("a"), Tags: tags}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a message over the limit by its tags: %v, want ErrTooLarge", err)
	}
}
