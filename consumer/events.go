package consumer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/inferq/inferq/lograte"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/task"
)

// EventSender opens the stream the consumer publishes its events on
// (progress, DLQ alerts): KubeMQ Events, not stored, lost when no one
// subscribes. Conn's Broker opens an *mq.EventStream.
type EventSender interface {
	// EventStream returns a new stream, connected on its first Publish;
	// rejected is told of each event the broker refused after Publish had
	// returned.
	EventStream(rejected func(error)) EventStream
}

// EventStream publishes events in order. *mq.EventStream satisfies it.
type EventStream interface {
	// Publish hands an event over and returns once the stream took it.
	Publish(ctx context.Context, channel string, body []byte, tags map[string]string) error
	// Close lets what was handed over reach the broker (within ctx) and
	// ends the stream.
	Close(ctx context.Context)
}

// Progress percentages of the steps the consumer reports.
const (
	PctReceived = 10
	PctRunning  = 50
	PctStored   = 100
	PctRetrying = 0
	PctFailed   = 100
)

// publishTries bounds the attempts at one event: a stream that broke is
// replaced once; a second failure drops the event (counted).
const publishTries = 2

// publishTimeout bounds one attempt: a stream that gRPC's flow control
// holds this long is given up (mq.EventStream ends it).
const publishTimeout = 2 * time.Second

type event struct {
	channel string
	body    []byte
	tags    map[string]string
}

// publisher publishes events from a bounded buffer on its own goroutine
// over one event stream (a write per event, not a round trip: KUBEMQ.md
// fact 42), so that publishing never blocks the task path;
// an event that does not fit in the buffer, or that the stream fails
// publishTries times, is dropped and counted.
type publisher struct {
	stream  EventStream
	ch      chan event
	sent    func()
	dropped func()
	log     *slog.Logger
	warn    *lograte.Limiter
}

func newPublisher(src EventSender, size int, sent, dropped func(), log *slog.Logger) *publisher {
	p := &publisher{ch: make(chan event, size), sent: sent, dropped: dropped, log: log, warn: lograte.New(log, time.Minute)}
	p.stream = src.EventStream(p.rejected)
	return p
}

// rejected counts an event the broker refused after it was handed over.
func (p *publisher) rejected(err error) {
	p.dropped()
	p.warn.Warn("event refused by the broker", "err", err)
}

// publish queues an event or drops it at once when the buffer is full.
func (p *publisher) publish(e event) {
	select {
	case p.ch <- e:
	default:
		p.dropped()
	}
}

// progress queues a progress event for a task on its queue's progress
// channel.
func (p *publisher) progress(queue, taskID string, pct int, detail string) {
	body, tags := task.Progress{TaskID: taskID, Pct: pct, Detail: detail}.Encode()
	p.publish(event{channel: queue + ".progress", body: body, tags: tags})
}

// run publishes queued events until ctx ends, then what is left for up to
// a second, and closes the stream.
func (p *publisher) run(ctx context.Context) {
	for {
		select {
		case e := <-p.ch:
			p.sendOne(ctx, e)
		case <-ctx.Done():
			drain, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			for {
				select {
				case e := <-p.ch:
					p.sendOne(drain, e)
				default:
					p.stream.Close(drain)
					return
				}
			}
		}
	}
}

func (p *publisher) sendOne(ctx context.Context, e event) {
	var err error
	for range publishTries {
		actx, cancel := context.WithTimeout(ctx, publishTimeout)
		err = p.stream.Publish(actx, e.channel, e.body, e.tags)
		cancel()
		if err == nil {
			p.sent()
			return
		}
		if ctx.Err() != nil || errors.Is(err, mq.ErrClosed) {
			break
		}
	}
	p.dropped()
	p.log.Debug("event dropped", "channel", e.channel, "err", err)
}

// Alert is what the DLQ alert hook reports: the body of the event on
// <queue>.dlq and of the webhook POST.
type Alert struct {
	TaskID   string `json:"task_id"`
	Model    string `json:"model"`
	Queue    string `json:"queue"`
	DLQ      string `json:"dlq"`
	Error    string `json:"error"`
	Attempts int    `json:"attempts"`
	Time     string `json:"time"`
}

// alerter fires the DLQ alert once per dead-lettered task: an event on
// <queue>.dlq through the publisher, and a POST to a webhook when one is
// configured, from a bounded set of goroutines with a timeout, never
// blocking the consumer.
//
// The webhook's client follows no redirect, to another host or the same
// one: a 3xx answer is a failed alert (logged with the host and the
// status, never the target). A redirect would re-POST the alert (307,
// 308) to wherever the webhook's server, or whoever took it over, points,
// perhaps over plain HTTP; the configured URL is the only one trusted.
type alerter struct {
	pub     *publisher
	webhook string
	client  *http.Client
	slots   chan struct{}
	dropped func()
	log     *slog.Logger
	wg      sync.WaitGroup
}

func newAlerter(pub *publisher, webhook string, timeout time.Duration, dropped func(), log *slog.Logger) *alerter {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	client := &http.Client{Timeout: timeout, CheckRedirect: noRedirect}
	return &alerter{pub: pub, webhook: webhook, client: client,
		slots: make(chan struct{}, 8), dropped: dropped, log: log}
}

// noRedirect is the webhook client's CheckRedirect: the 3xx answer itself
// is returned, and post reports it.
func noRedirect(*http.Request, []*http.Request) error {
	return http.ErrUseLastResponse
}

func (a *alerter) fire(al Alert) {
	body, err := json.Marshal(al)
	if err != nil {
		return
	}
	a.pub.publish(event{channel: al.Queue + ".dlq", body: body, tags: map[string]string{
		task.TagTaskID: al.TaskID, "attempts": strconv.Itoa(al.Attempts),
	}})
	if a.webhook == "" {
		return
	}
	select {
	case a.slots <- struct{}{}:
	default:
		a.dropped()
		a.log.Warn("dlq webhook skipped: too many in flight", "task_id", al.TaskID)
		return
	}
	a.wg.Add(1)
	go func() {
		defer func() { <-a.slots; a.wg.Done() }()
		if err := a.post(body); err != nil {
			a.dropped()
			a.log.Warn("dlq webhook failed", "task_id", al.TaskID, "err", err)
		}
	}()
}

// post sends body to the webhook. Its errors never carry the webhook's
// URL, whose path or query often is the credential (Slack, Teams, Discord
// hooks): only its host.
func (a *alerter) post(body []byte) error {
	host := webhookHost(a.webhook)
	resp, err := a.client.Post(a.webhook, "application/json", bytes.NewReader(body))
	if err != nil {
		return redactURL(host, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 3 {
		return fmt.Errorf("webhook at %s answered %s: redirects are not followed; set the alert webhook to the URL that takes the POST", host, resp.Status)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook at %s answered %s", host, resp.Status)
	}
	return nil
}

// webhookHost is what the logs may say of a webhook URL: its host.
func webhookHost(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Host != "" {
		return u.Host
	}
	return "(unparsable URL)"
}

// redactURL replaces the URL of every *url.Error in err's chain (the form
// of net/http's client errors, including those of a redirect's target) by
// host.
func redactURL(host string, err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	return fmt.Errorf("webhook %s at %s: %w", ue.Op, host, redactURL(host, ue.Err))
}

// wait waits for webhook posts in flight (each bounded by the timeout).
func (a *alerter) wait() { a.wg.Wait() }
