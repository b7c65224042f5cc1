package mq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	qs "github.com/kubemq-io/kubemq-go/queues_stream"
)

// Tags set by the helpers that resend a polled message.
const (
	// TagAttempt carries the attempt number on a delayed retry (Retry).
	TagAttempt = "inferq-attempt" // the same tag as task.TagAttempt
	// TagError, TagAttempts and TagOrigin describe why and from where
	// SendDeadLetter copied a message.
	TagError    = "error"
	TagAttempts = "attempts"
	TagOrigin   = "origin"
	// TagTruncated marks a copy that SendCopy (or SendDeadLetter) sent by
	// reference because the message was over Config.MaxMessageBytes: it
	// lists what was cut to its first RefBytes ("body", "metadata",
	// "tags", comma separated). TagOriginalBytes is the original body's
	// length, TagOriginalMetadataBytes the original metadata's.
	TagTruncated             = "inferq-truncated"
	TagOriginalBytes         = "inferq-original-bytes"
	TagOriginalMetadataBytes = "inferq-original-metadata-bytes"
)

// RefBytes is how much of a message's body, metadata and of each tag a
// copy by reference keeps.
const RefBytes = 1024

// Sender sends queue messages through one queues_stream client. Concurrent
// Send calls are coalesced: one goroutine takes whatever calls are queued
// and sends their messages in one stream send (up to Config.SendBatchMax
// messages and SendBatchBytes), so that many callers sending one message
// each get batch throughput (1 msg per call 6.4k/s, 100 per call 105k/s
// on the real broker). Each caller gets its own result.
//
// Sender is safe for concurrent use and lives as long as its Conn.
type Sender struct {
	c    *Conn
	reqs chan *sendReq

	calls atomic.Int64 // stream sends made
	sent  atomic.Int64 // messages stored
}

type sendReq struct {
	ctx  context.Context
	msgs []OutMessage
	errs []error // per message, filled by run
	err  error   // for the whole request
	done chan struct{}
}

func newSender(c *Conn) *Sender {
	return &Sender{c: c, reqs: make(chan *sendReq, 4096)}
}

// Calls reports how many stream sends the Sender made; Messages how many
// messages the broker stored. For tests and metrics.
func (s *Sender) Calls() int64    { return s.calls.Load() }
func (s *Sender) Messages() int64 { return s.sent.Load() }

// Send sends msgs and waits until the broker stored them or refused them.
// It returns nil when all were stored; otherwise, with one message, that
// message's error, with several a *BatchError whose Errs[i] is the error of
// msgs[i] (nil when stored). Invalid or oversized messages fail the whole
// call before anything is sent. A broker that is away gives ErrUnavailable
// at once, or as soon as the stream notices it is lost (up to a second or
// two; the caller decides on retries). ctx bounds the wait: a Send whose
// ctx ends before the broker answered may still have been stored.
func (s *Sender) Send(ctx context.Context, msgs ...OutMessage) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := s.c.isClosed(); err != nil {
		return err
	}
	for i := range msgs {
		m := &msgs[i]
		switch {
		case m.Channel == "":
			return fmt.Errorf("mq: send: message %d: empty channel", i)
		case m.size() > s.c.cfg.MaxMessageBytes:
			return fmt.Errorf("mq: send to %s: %d bytes over the %d limit (body, metadata and tags): %w", m.Channel, m.size(), s.c.cfg.MaxMessageBytes, ErrTooLarge)
		case m.DelaySeconds < 0 || m.ExpirationSeconds < 0 || m.MaxReceiveCount < 0:
			return fmt.Errorf("mq: send to %s: negative policy value", m.Channel)
		}
	}
	r := &sendReq{ctx: ctx, msgs: msgs, done: make(chan struct{})}
	select {
	case s.reqs <- r:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.c.life.Done():
		return fmt.Errorf("mq: send: %w", ErrClosed)
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		return fmt.Errorf("mq: send to %s: no answer from the broker before the caller's context ended: %w", channels(msgs), ctx.Err())
	}
	if r.err != nil {
		return r.err
	}
	failed := false
	for _, err := range r.errs {
		failed = failed || err != nil
	}
	switch {
	case !failed:
		return nil
	case len(r.errs) == 1:
		return r.errs[0]
	default:
		return &BatchError{Errs: r.errs}
	}
}

// run owns the stream client: it warms it up at start (trap 3), gathers
// queued requests into batches and sends them, replaces the client after
// Config.ReplaceAfter of unavailability, and fails what is queued with
// ErrClosed when the Conn closes.
func (s *Sender) run() {
	l := &sendLoop{s: s}
	defer l.stop()
	if err := l.connect(); err != nil {
		s.c.log.Warn("mq sender warm up failed", "err", err)
	}
	for {
		first, ok := l.next()
		if !ok {
			return
		}
		batch := l.gather(first)
		err := l.connect()
		if err == nil {
			l.downSince = time.Time{}
			s.sendBatch(l.client, batch)
			continue
		}
		for _, r := range batch {
			r.err = fmt.Errorf("mq: send: %w", err)
			close(r.done)
		}
		l.unavailable(err)
	}
}

// sendLoop is the state of the Sender's run, owned by its goroutine.
type sendLoop struct {
	s         *Sender
	client    *streamClient
	downSince time.Time
	pending   *sendReq // taken from the queue, for the next batch
}

// connect makes the stream client when there is none and reports whether
// its upstream is ready.
func (l *sendLoop) connect() error {
	if l.client == nil {
		sc, err := l.s.c.newStreamClient(l.s.c.life, "send")
		if err != nil {
			return err
		}
		l.client = sc
	}
	return l.client.warmSend()
}

// next returns the next request: the one left over from the last batch, or
// the next queued; false once the Conn closes.
func (l *sendLoop) next() (*sendReq, bool) {
	if r := l.pending; r != nil {
		l.pending = nil
		return r, true
	}
	select {
	case r := <-l.s.reqs:
		return r, true
	case <-l.s.c.life.Done():
		return nil, false
	}
}

// gather adds the requests already queued to first, within SendBatchMax
// and SendBatchBytes; a request that does not fit waits for the next batch.
func (l *sendLoop) gather(first *sendReq) []*sendReq {
	cfg := &l.s.c.cfg
	batch, n, size := []*sendReq{first}, len(first.msgs), sizeOf(first.msgs)
	for n < cfg.SendBatchMax && size < cfg.SendBatchBytes {
		select {
		case r := <-l.s.reqs:
			if n+len(r.msgs) > cfg.SendBatchMax || size+sizeOf(r.msgs) > cfg.SendBatchBytes {
				l.pending = r
				return batch
			}
			batch = append(batch, r)
			n += len(r.msgs)
			size += sizeOf(r.msgs)
		default:
			return batch
		}
	}
	return batch
}

// unavailable notes a failed connect: after ReplaceAfter of unavailability
// the client is replaced (a new client gets a new connection).
func (l *sendLoop) unavailable(err error) {
	if !errors.Is(err, ErrUnavailable) {
		return
	}
	switch {
	case l.downSince.IsZero():
		l.downSince = time.Now()
	case time.Since(l.downSince) > l.s.c.cfg.ReplaceAfter && l.client != nil:
		l.s.c.log.Info("mq sender replacing stream client", "down_for", time.Since(l.downSince).Round(time.Millisecond))
		l.client.close()
		l.client, l.downSince = nil, time.Time{}
	}
}

// stop closes the client and fails what is still queued with ErrClosed.
func (l *sendLoop) stop() {
	if l.client != nil {
		l.client.close()
	}
	for {
		select {
		case r := <-l.s.reqs:
			r.err = fmt.Errorf("mq: send: %w", ErrClosed)
			close(r.done)
		default:
			return
		}
	}
}

// channels names where msgs go, for an error: the channel, or the first
// and how many others.
func channels(msgs []OutMessage) string {
	others := 0
	for i := range msgs {
		if msgs[i].Channel != msgs[0].Channel {
			others++
		}
	}
	if others == 0 {
		return msgs[0].Channel
	}
	return fmt.Sprintf("%s and %d messages to other channels", msgs[0].Channel, others)
}

func sizeOf(msgs []OutMessage) int {
	n := 0
	for i := range msgs {
		n += msgs[i].size()
	}
	return n
}

// sendBatch sends the messages of batch in chunks within the limits and
// completes every request.
func (s *Sender) sendBatch(client *streamClient, batch []*sendReq) {
	type slot struct {
		r *sendReq
		i int
	}
	var (
		slots []slot
		msgs  []*qs.QueueMessage
		size  int
	)
	flush := func() {
		if len(msgs) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(s.c.life, s.c.cfg.SendTimeout)
		res, err := client.c.Send(ctx, msgs...)
		cancel()
		s.calls.Add(1)
		if err == nil && (res == nil || len(res.Results) != len(msgs)) {
			err = fmt.Errorf("broker answered %d results for %d messages", resultsLen(res), len(msgs))
		}
		for k, sl := range slots {
			switch {
			case err != nil:
				sl.r.errs[sl.i] = classify("send to "+sl.r.msgs[sl.i].Channel, err)
			case res.Results[k].IsError:
				sl.r.errs[sl.i] = classify("send to "+sl.r.msgs[sl.i].Channel, errors.New(res.Results[k].Error))
			default:
				s.sent.Add(1)
			}
		}
		slots, msgs, size = slots[:0], msgs[:0], 0
	}
	for _, r := range batch {
		r.errs = make([]error, len(r.msgs))
		if err := r.ctx.Err(); err != nil {
			r.err = err
			continue
		}
		for i := range r.msgs {
			m := &r.msgs[i]
			if len(msgs) >= s.c.cfg.SendBatchMax || size+m.size() > s.c.cfg.SendBatchBytes {
				flush()
			}
			msgs = append(msgs, m.toQS())
			slots = append(slots, slot{r, i})
			size += m.size()
		}
	}
	flush()
	for _, r := range batch {
		close(r.done)
	}
}

func resultsLen(r *qs.SendResult) int {
	if r == nil {
		return 0
	}
	return len(r.Results)
}

// SendRetry sends the copy of m that a delayed retry needs (DESIGN 4.2): to
// m.Channel, with DelaySeconds = delay (rounded up to whole seconds) and
// TagAttempt = attempt. It does not settle m: once it returns nil the
// caller Acks m (if that Ack fails the task exists twice, which
// at-least-once delivery allows); on an error m is untouched. A message over
// Config.MaxMessageBytes cannot be resent (a retry needs the whole task):
// that fails at once with ErrTooLarge. Safe for concurrent use.
func (s *Sender) SendRetry(ctx context.Context, m *Message, delay time.Duration, attempt int) error {
	out := m.Out(m.Channel, map[string]string{TagAttempt: strconv.Itoa(attempt)})
	out.DelaySeconds = int((delay + time.Second - 1) / time.Second)
	if err := s.Send(ctx, out); err != nil {
		return fmt.Errorf("mq: retry %s: %w", m.ID, err)
	}
	return nil
}

// SendCopy sends m raw (body, metadata, tags plus extra, no receive
// policy) to channel; like SendRetry it does not settle m. It is the
// unprocessable-queue and dead-letter path, so it works for any message
// that could be received: one over Config.MaxMessageBytes (body, metadata
// and tags together), or one the broker refuses for its size, is sent by
// reference instead: the first RefBytes of its body and metadata, its tags
// and extra with each value cut to RefBytes, TagTruncated,
// TagOriginalBytes and TagOriginalMetadataBytes. Safe for concurrent use.
func (s *Sender) SendCopy(ctx context.Context, m *Message, channel string, extra map[string]string) error {
	out := m.Out(channel, extra)
	out.MaxReceiveCount, out.MaxReceiveQueue = 0, ""
	byRef := out.size() > s.c.cfg.MaxMessageBytes
	if byRef {
		out = reference(m, channel, extra, s.c.cfg.MaxMessageBytes)
	}
	err := s.Send(ctx, out)
	if err != nil && !byRef && errors.Is(err, ErrTooLarge) {
		// The broker's limit is below ours.
		err = s.Send(ctx, reference(m, channel, extra, s.c.cfg.MaxMessageBytes))
	}
	if err != nil {
		return fmt.Errorf("mq: forward %s to %s: %w", m.ID, channel, err)
	}
	return nil
}

// SendDeadLetter sends a copy of m to dlq with the tags TagError (reason),
// TagAttempts and TagOrigin (m's channel), like SendCopy (by reference when
// m is too large to send again; m is not settled).
func (s *Sender) SendDeadLetter(ctx context.Context, m *Message, dlq, reason string, attempts int) error {
	return s.SendCopy(ctx, m, dlq, map[string]string{
		TagError:    reason,
		TagAttempts: strconv.Itoa(attempts),
		TagOrigin:   m.Channel,
	})
}

// reference is the copy of m that SendCopy sends when m itself is too large:
// the first RefBytes of body and metadata, m's tags and extra with keys
// longer than RefBytes dropped and values cut to RefBytes, and the tags
// that say so. When even that is over limit (thousands of tags), only
// extra's tags and the reference's own are kept.
func reference(m *Message, channel string, extra map[string]string, limit int) OutMessage {
	var cut []string
	body := m.Body
	if len(body) > RefBytes {
		body, cut = body[:RefBytes], append(cut, "body")
	}
	meta := m.Metadata
	if len(meta) > RefBytes {
		meta, cut = cutUTF8(meta, RefBytes), append(cut, "metadata")
	}
	own := func() map[string]string {
		return map[string]string{
			TagOriginalBytes:         strconv.Itoa(len(m.Body)),
			TagOriginalMetadataBytes: strconv.Itoa(len(m.Metadata)),
		}
	}
	tags, tagsCut := cutTags(m.Tags, extra)
	maps.Copy(tags, own())
	out := OutMessage{Channel: channel, Body: body, Metadata: meta, Tags: tags}
	if out.size()+len(TagTruncated)+len("body,metadata,tags") > limit {
		tags, _ = cutTags(nil, extra)
		maps.Copy(tags, own())
		out.Tags, tagsCut = tags, true
	}
	if tagsCut {
		cut = append(cut, "tags")
	}
	if len(cut) == 0 {
		// Not cut at all (the broker refused it whole): say so anyway.
		cut = append(cut, "none")
	}
	out.Tags[TagTruncated] = strings.Join(cut, ",")
	return out
}

// cutTags merges tags and extra (extra wins), dropping keys longer than
// RefBytes and cutting values to RefBytes; cut reports whether anything was.
func cutTags(tags, extra map[string]string) (out map[string]string, cut bool) {
	out = make(map[string]string, len(tags)+len(extra)+3)
	for _, src := range []map[string]string{tags, extra} {
		for k, v := range src {
			if len(k) > RefBytes {
				cut = true
				continue
			}
			if len(v) > RefBytes {
				v, cut = cutUTF8(v, RefBytes), true
			}
			out[k] = v
		}
	}
	return out, cut
}

// cutUTF8 returns the longest prefix of s of at most n bytes that does not
// end inside a UTF-8 sequence (protobuf strings must stay valid).
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
