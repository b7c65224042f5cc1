package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/shard"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
)

// Errors of this package; others wrap them or mq's sentinels
// (mq.ErrUnavailable when the broker is away).
var (
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("client: closed")
	// ErrReturned: Wait already handed out this task's record (to another
	// Wait), or the task was forgotten. Records are handed out once so
	// that the Client does not keep them.
	ErrReturned = errors.New("client: result already returned or forgotten")
	// ErrNotReady: the reply subscription is not live yet (see Ready).
	ErrNotReady = errors.New("client: reply subscription not ready")
)

// tagProbe marks the Client's probe events on its own reply channel (see
// Ready); the value is the Client's nonce. Records carry task_id instead.
const tagProbe = "inferq-client-probe"

// Client enqueues tasks and waits for their results over one reply
// subscription. All its methods are safe for concurrent use. A Client
// owns its mq.Conn; Close releases both.
type Client struct {
	cfg  Config
	log  *slog.Logger
	conn *mq.Conn
	tab  *table

	life   context.Context // the subscription's lifetime
	stop   context.CancelFunc
	closed chan struct{}
	once   sync.Once
	wg     sync.WaitGroup

	live     chan struct{} // closed when no record sent from now on can be missed
	liveOnce sync.Once
	nonce    string
	probeMu  sync.Mutex
	probeErr error // the last probe's failure
	// refused is closed when the broker refused the Client's credentials
	// (mq.ErrUnauthorized): Ready fails at once from then on.
	refused   chan struct{}
	cursor    uint64 // last written to CursorFile; dispatcher only
	cursorErr error  // last cursor write failure; dispatcher only
}

// New dials the broker and subscribes to the reply channel, from the
// sequence after the one in Config.CursorFile, else from Config.StartSeq,
// else to new records only. It does not wait for the broker: a broker that
// is away makes Enqueue wait (within its ctx) and the subscription retry.
// ctx bounds New only; Close ends the Client.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	start := cfg.StartSeq
	if cfg.CursorFile != "" {
		seq, ok, err := readCursor(cfg.CursorFile)
		if err != nil {
			return nil, err
		}
		if ok {
			start = seq + 1
		}
	}
	conn, err := mq.Dial(ctx, cfg.Broker)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	c := &Client{
		cfg:     cfg,
		log:     cfg.Logger.With("reply_channel", cfg.ReplyChannel),
		conn:    conn,
		tab:     newTable(cfg.MaxUnclaimed, cfg.DedupWindow, cfg.UnclaimedTTL),
		closed:  make(chan struct{}),
		live:    make(chan struct{}),
		refused: make(chan struct{}),
		nonce:   task.NewID(),
		cursor:  max(start, 1) - 1,
	}
	c.life, c.stop = context.WithCancel(context.WithoutCancel(ctx))
	events, err := conn.SubscribeEventsStore(c.life, cfg.ReplyChannel, "", start)
	if err != nil {
		c.stop()
		_ = conn.Close()
		return nil, fmt.Errorf("client: subscribe %s: %w", cfg.ReplyChannel, err)
	}
	c.tab.last = c.cursor
	if start > 0 {
		// Every record from start on is replayed, whenever the stream
		// opens: nothing sent from now on can be missed.
		c.setLive()
	} else {
		// New-only starts when the broker opens the stream, which we
		// cannot see: probe until one of our probes comes through.
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.probe()
		}()
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.dispatch(events)
	}()
	return c, nil
}

// ReplyChannel returns the Events Store channel the Client's tasks name in
// reply_to.
func (c *Client) ReplyChannel() string { return c.cfg.ReplyChannel }

// Conn returns the Client's connection, for calls this package does not
// wrap. Do not close it.
func (c *Client) Conn() *mq.Conn { return c.conn }

// Stats returns the Client's counters.
func (c *Client) Stats() Stats { return c.tab.stats() }

func (c *Client) setLive() { c.liveOnce.Do(func() { close(c.live) }) }

// Ready waits until the reply subscription is live: with a start sequence
// (cursor or StartSeq) at once; for a new-only subscription, once the broker
// delivered one of the Client's probe events on its reply channel, which
// also proves the broker answers. Enqueue waits for it too. On ctx's end it
// returns an error wrapping ErrNotReady, the last probe failure (such as
// mq.ErrUnavailable) and ctx's error; at once, wrapping ErrNotReady and
// mq.ErrUnauthorized, once the broker refused the Client's credentials.
func (c *Client) Ready(ctx context.Context) error {
	select {
	case <-c.live:
		return nil
	default:
	}
	select {
	case <-c.live:
		return nil
	case <-c.closed:
		return ErrClosed
	case <-c.refused:
		c.probeMu.Lock()
		perr := c.probeErr
		c.probeMu.Unlock()
		return fmt.Errorf("%w on %s at %s: %w", ErrNotReady, c.cfg.ReplyChannel, c.cfg.Broker.Address, perr)
	case <-ctx.Done():
		c.probeMu.Lock()
		perr := c.probeErr
		c.probeMu.Unlock()
		if perr != nil {
			return fmt.Errorf("%w on %s at %s: %w (%w)", ErrNotReady, c.cfg.ReplyChannel, c.cfg.Broker.Address, perr, ctx.Err())
		}
		return fmt.Errorf("%w on %s at %s: %w", ErrNotReady, c.cfg.ReplyChannel, c.cfg.Broker.Address, ctx.Err())
	}
}

// probe sends probe events to the reply channel, with backoff, until one
// comes back through the subscription, the broker refuses the Client's
// credentials, or the Client closes.
func (c *Client) probe() {
	body := []byte(`{"probe":"` + c.nonce + `"}`)
	tags := map[string]string{tagProbe: c.nonce}
	wait := c.cfg.ReadyRetry
	for {
		ctx, cancel := context.WithTimeout(c.life, 5*time.Second)
		err := c.conn.SendEventStore(ctx, c.cfg.ReplyChannel, body, tags)
		cancel()
		c.probeMu.Lock()
		c.probeErr = err
		c.probeMu.Unlock()
		if errors.Is(err, mq.ErrUnauthorized) {
			c.log.Error("the broker refused the client's credentials (broker.auth_token)", "err", err)
			close(c.refused)
			return
		}
		if err != nil && c.life.Err() == nil {
			c.log.Debug("client reply probe failed", "err", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-c.live:
			t.Stop()
			return
		case <-c.life.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// dispatch owns the subscription: it files records in the table, watches
// for the probe, evicts stale strays and writes the cursor.
func (c *Client) dispatch(events <-chan mq.Event) {
	tick := time.NewTicker(c.cfg.CursorInterval)
	defer tick.Stop()
	defer c.saveCursor()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return
			}
			c.handle(ev)
		case now := <-tick.C:
			c.tab.expire(now)
			c.saveCursor()
		}
	}
}

func (c *Client) handle(ev mq.Event) {
	if p, ok := ev.Tags[tagProbe]; ok {
		c.tab.seen(ev.Sequence)
		if p == c.nonce {
			c.setLive()
		}
		return
	}
	id := ev.Tags[task.TagTaskID]
	if id != "" && c.tab.dropDone(id, ev.Sequence) {
		return // a known duplicate, dropped before parsing it
	}
	rec, err := task.ParseRecord(ev.Body)
	if err != nil {
		c.log.Warn("client dropped an unreadable reply", "seq", ev.Sequence, "task_id", id, "err", err)
		c.tab.seen(ev.Sequence)
		return
	}
	if id == "" {
		id = rec.TaskID
	}
	if id == "" || !rec.Status.Terminal() {
		c.log.Debug("client ignored a reply", "seq", ev.Sequence, "task_id", id, "status", rec.Status)
		c.tab.seen(ev.Sequence)
		return
	}
	if !c.tab.put(id, rec, ev.Sequence, time.Now()) {
		c.log.Debug("client dropped a duplicate record", "seq", ev.Sequence, "task_id", id)
	}
}

// saveCursor writes the low-water mark when it moved. Dispatcher only.
func (c *Client) saveCursor() {
	if c.cfg.CursorFile == "" {
		return
	}
	low := c.tab.lowWater()
	if low == c.cursor {
		return
	}
	err := writeCursor(c.cfg.CursorFile, low)
	if err != nil {
		if c.cursorErr == nil || c.cursorErr.Error() != err.Error() {
			c.log.Warn("client cursor not saved", "err", err)
		}
		c.cursorErr = err
		return
	}
	c.cursor, c.cursorErr = low, nil
}

// Close ends the subscription, writes the cursor file, fails blocked Waits
// with ErrClosed and closes the connection. Calls in flight fail. Records
// not waited for are not lost when CursorFile is set: the next Client with
// that file gets them again. Close is safe to call more than once.
func (c *Client) Close() error {
	var err error
	c.once.Do(func() {
		close(c.closed)
		c.stop()
		c.wg.Wait()
		err = c.conn.Close()
		if c.cursorErr != nil {
			err = errors.Join(err, c.cursorErr)
		}
	})
	return err
}

// Option changes how Enqueue and EnqueueMany send tasks.
type Option func(*enqueueOptions)

type enqueueOptions struct {
	queue    string
	id       string
	compat   bool
	retries  bool
	maxRecv  int
	dlq      string
	binary   bool
	shards   int
	taskOpts []task.Option
}

// WithQueue sends to queue instead of the model's default queue.
func WithQueue(queue string) Option { return func(o *enqueueOptions) { o.queue = queue } }

// WithShards spreads the tasks over n shards of the queue (package
// shard: <queue>, <queue>.shard-1, ...), by task id; it overrides
// Config.QueueShards. Give the servers the same count (serve
// --queue-shards).
func WithShards(n int) Option { return func(o *enqueueOptions) { o.shards = n } }

// WithID sets the task id (Enqueue only); default a random UUID.
func WithID(id string) Option { return func(o *enqueueOptions) { o.id = id } }

// WithRetries sets the queue policy of the task: after maxReceiveCount
// deliveries the broker moves it to deadLetterQueue (like the Python
// adapter's max_retries and failed-task queue).
func WithRetries(maxReceiveCount int, deadLetterQueue string) Option {
	return func(o *enqueueOptions) { o.retries, o.maxRecv, o.dlq = true, maxReceiveCount, deadLetterQueue }
}

// WithBinaryInputs sends the task in the binary form.
func WithBinaryInputs() Option { return func(o *enqueueOptions) { o.binary = true } }

// WithTaskOptions passes options to task.NewTask: task.WithTimeout,
// task.WithOutputs, task.WithBinaryOutputs, task.WithPriority,
// task.WithTraceParent, task.WithCreatedAt. task.WithReplyTo is set by the
// Client.
func WithTaskOptions(opts ...task.Option) Option {
	return func(o *enqueueOptions) { o.taskOpts = append(o.taskOpts, opts...) }
}

// WithCompat sends the task without reply_to, the Python adapter's way:
// a PENDING record goes to the per-task result channel first (expiry
// Config.CompatExpiry), the task after it, and inferq writes the result
// there. Read it with Status; Wait does not see compat tasks. Each such
// channel costs the broker files for 24 h: for compatibility only.
func WithCompat() Option { return func(o *enqueueOptions) { o.compat = true } }

func (c *Client) options(opts []Option) enqueueOptions {
	o := enqueueOptions{binary: c.cfg.BinaryInputs, shards: c.cfg.QueueShards}
	if c.cfg.MaxReceiveCount > 0 {
		o.retries, o.maxRecv, o.dlq = true, c.cfg.MaxReceiveCount, c.cfg.DeadLetterQueue
	}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// QueueOf returns the queue a model's tasks go to by default.
func (c *Client) QueueOf(model string) string { return c.cfg.QueuePrefix + model }

// build makes the messages of one task: the compat PENDING record (when
// asked) and the task.
func (c *Client) build(o *enqueueOptions, id, model string, inputs []tensor.Tensor) ([]mq.OutMessage, error) {
	topts := append([]task.Option{}, o.taskOpts...)
	if o.binary {
		topts = append(topts, task.WithBinaryInputs())
	}
	created := time.Now()
	topts = append(topts, task.WithCreatedAt(created))
	if !o.compat {
		topts = append(topts, task.WithReplyTo(c.cfg.ReplyChannel))
	}
	body, tags, err := task.NewTask(id, model, inputs, topts...)
	if err != nil {
		return nil, fmt.Errorf("client: task for %s: %w", model, err)
	}
	queue := o.queue
	if queue == "" {
		queue = c.QueueOf(model)
	}
	if o.shards > 1 {
		queue = shard.Channel(queue, shard.Pick(id, min(o.shards, shard.Max)))
	}
	msg := mq.OutMessage{Channel: queue, Body: body, Tags: tags}
	if o.retries {
		msg.MaxReceiveCount, msg.MaxReceiveQueue = o.maxRecv, o.dlq
	}
	if !o.compat {
		return []mq.OutMessage{msg}, nil
	}
	pending := &task.Record{TaskID: id, Status: task.StatusPending, CreatedAt: created}
	pbody, ptags := pending.Encode()
	return []mq.OutMessage{{
		Channel: c.cfg.ResultPrefix + id, Body: pbody, Tags: ptags,
		ExpirationSeconds: int((c.cfg.CompatExpiry + time.Second - 1) / time.Second),
	}, msg}, nil
}

// Enqueue sends one task for model with inputs and returns its id. It
// returns once the broker stored the task. Unless WithCompat, it first waits
// (within ctx) for the reply subscription to be live (Ready), so no record
// can be missed, and registers the task so that its record is kept until
// Wait or Forget, however early it comes. A send that fails because the
// broker is away (mq.ErrUnavailable, such as during a broker restart) is
// made again, with backoff, for up to Config.SendRetryFor; a task whose
// stream send was cut off may so be stored twice (at-least-once), its
// record still reaches Wait once. ctx bounds the call: a task whose ctx
// ended during the send may still have been stored.
func (c *Client) Enqueue(ctx context.Context, model string, inputs []tensor.Tensor, opts ...Option) (string, error) {
	o := c.options(opts)
	id := o.id
	if id == "" {
		id = task.NewID()
	}
	errs, err := c.send(ctx, &o, model, []string{id}, [][]tensor.Tensor{inputs})
	if err == nil {
		err = errs[0]
	}
	if err != nil {
		return "", err
	}
	return id, nil
}

// EnqueueMany sends one task per element of inputs, all for model with the
// same options (WithID is ignored), batched into as few stream sends as the
// connection's limits allow. ids[i] is the id of inputs[i]. When some fail,
// the error is an *mq.BatchError whose Errs[i] says why task i was not sent
// (nil: it was sent); a failure for every task (broker away, closed) may
// also come as one plain error. Otherwise as Enqueue.
func (c *Client) EnqueueMany(ctx context.Context, model string, inputs [][]tensor.Tensor, opts ...Option) (ids []string, err error) {
	o := c.options(opts)
	ids = make([]string, len(inputs))
	for i := range ids {
		ids[i] = task.NewID()
	}
	errs, err := c.send(ctx, &o, model, ids, inputs)
	if err != nil {
		return ids, err
	}
	for _, e := range errs {
		if e != nil {
			return ids, &mq.BatchError{Errs: errs}
		}
	}
	return ids, nil
}

// send builds and sends the tasks; errs[i] is task i's error when err is
// nil.
func (c *Client) send(ctx context.Context, o *enqueueOptions, model string, ids []string, inputs [][]tensor.Tensor) (errs []error, err error) {
	select {
	case <-c.closed:
		return nil, ErrClosed
	default:
	}
	if model == "" {
		return nil, errors.New("client: empty model name")
	}
	per := 1
	if o.compat {
		per = 2
	}
	o.traceFrom(ctx)
	msgs := make([]mq.OutMessage, 0, per*len(ids))
	for i, id := range ids {
		m, err := c.build(o, id, model, inputs[i])
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, m...)
	}
	if !o.compat {
		if err := c.Ready(ctx); err != nil {
			return nil, fmt.Errorf("client: enqueue %s: %w", model, err)
		}
		c.tab.expect(ids...)
	}
	merrs := c.sendRetrying(ctx, msgs, per)
	errs = make([]error, len(ids))
	if merrs != nil {
		var failed []string
		for i := range ids {
			if perr := merrs[per*i]; per == 2 && perr != nil && merrs[per*i+1] == nil {
				c.log.Warn("client compat PENDING record not written", "task_id", ids[i], "err", perr)
			}
			if e := merrs[per*i+per-1]; e != nil {
				errs[i] = fmt.Errorf("client: enqueue %s to %s: %w", model, msgs[per*i+per-1].Channel, e)
				failed = append(failed, ids[i])
			}
		}
		if !o.compat {
			c.tab.unexpect(failed...)
		}
	}
	return errs, nil
}

// sendRetrying sends msgs (groups of per messages, the task last) and
// resends those that failed with mq.ErrUnavailable, with backoff between
// Config.Broker's RetryMin and RetryMax, until they are stored, ctx ends, the
// Client closes or Config.SendRetryFor passed since the first failure. A
// compat PENDING record is resent only with its task, so that it never
// lands after the task. It returns nil when all were stored, else each
// message's error (nil: stored).
func (c *Client) sendRetrying(ctx context.Context, msgs []mq.OutMessage, per int) []error {
	// The common case, a broker that takes everything, costs one Send: no
	// index list, no copy of the messages.
	round := msgs
	err := c.conn.Sender().Send(ctx, round...)
	if err == nil {
		return nil
	}
	errs := make([]error, len(msgs))
	todo := make([]int, len(msgs)) // round[k] is msgs[todo[k]]
	for i := range todo {
		todo[i] = i
	}
	var (
		b     *backoff.ExponentialBackOff
		first time.Time // of the first unavailability
		tries int
	)
	for {
		if tries > 0 { // the first round was sent above
			round = make([]mq.OutMessage, 0, len(todo))
			for _, i := range todo {
				round = append(round, msgs[i])
			}
			err = c.conn.Sender().Send(ctx, round...)
		}
		tries++
		var be *mq.BatchError
		if err != nil && (!errors.As(err, &be) || len(be.Errs) != len(round)) {
			be = &mq.BatchError{Errs: make([]error, len(round))}
			for k := range be.Errs {
				be.Errs[k] = err
			}
		}
		var again []int
		for k, i := range todo {
			if be == nil {
				errs[i] = nil
				continue
			}
			errs[i] = be.Errs[k]
			if !errors.Is(errs[i], mq.ErrUnavailable) {
				continue
			}
			// A PENDING record (not the last of its group) goes again only
			// when its task goes again: it is next in this round.
			if i%per == per-1 || (k+1 < len(todo) && todo[k+1] == i+1 && errors.Is(be.Errs[k+1], mq.ErrUnavailable)) {
				again = append(again, i)
			}
		}
		if len(again) == 0 {
			break
		}
		if b == nil {
			first = time.Now()
			b = &backoff.ExponentialBackOff{
				InitialInterval:     c.cfg.Broker.RetryMin * 3 / 4,
				MaxInterval:         c.cfg.Broker.RetryMax * 3 / 4,
				Multiplier:          2,
				RandomizationFactor: 1.0 / 3,
			}
			b.Reset()
			c.log.Info("client broker away, resending", "messages", len(again), "err", errs[again[0]])
		}
		away := time.Since(first)
		left := c.cfg.SendRetryFor - away
		wait := min(b.NextBackOff(), left)
		var stop error
		if left <= 0 {
			stop = fmt.Errorf("gave up after %v and %d tries (SendRetryFor %v)", away.Round(time.Millisecond), tries, c.cfg.SendRetryFor)
		} else {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				stop = fmt.Errorf("%w after %v and %d tries", ctx.Err(), away.Round(time.Millisecond), tries)
			case <-c.closed:
				stop = ErrClosed
			}
			t.Stop()
		}
		if stop != nil {
			for _, i := range again {
				errs[i] = fmt.Errorf("%w (%w)", errs[i], stop)
			}
			break
		}
		todo = again
	}
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	if b != nil {
		c.log.Info("client broker back, resent", "after", time.Since(first).Round(time.Millisecond), "tries", tries)
	}
	return nil
}

// Forget stops keeping the records of ids: one that is held is dropped, one
// that comes later is dropped as a duplicate. Use it for tasks nobody will
// Wait for. Blocked Waits are not affected.
func (c *Client) Forget(ids ...string) { c.tab.forget(ids...) }

// Wait returns the first terminal record of task id, waiting for it within
// ctx. A record that arrived earlier is returned at once. Concurrent Waits
// for one id all get the same record (treat it as read-only); after that
// the Client forgets it and a later Wait returns ErrReturned. Wait does not poll the broker; only
// tasks sent with a reply_to (not WithCompat) get here. It returns ctx's
// error when ctx ends and ErrClosed when the Client closes.
func (c *Client) Wait(ctx context.Context, id string) (*task.Record, error) {
	e, rec, err := c.tab.register(id)
	if rec != nil || err != nil {
		return rec, err
	}
	select {
	case <-e.arrived:
		return e.rec, nil
	case <-ctx.Done():
		if rec := c.tab.unregister(e); rec != nil {
			return rec, nil
		}
		return nil, ctx.Err()
	case <-c.closed:
		if rec := c.tab.unregister(e); rec != nil {
			return rec, nil
		}
		return nil, ErrClosed
	}
}

// MissingError is WaitAll's error when records are missing at ctx's end.
type MissingError struct {
	Missing, Total int
	// Err is ctx's error, ErrClosed, or the first other Wait error.
	Err error
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("client: %d of %d results missing: %v", e.Missing, e.Total, e.Err)
}

func (e *MissingError) Unwrap() error { return e.Err }

// WaitAll waits for the records of ids; recs[i] is the record of ids[i].
// When ctx ends (or the Client closes) first, it returns what arrived, nil
// for the rest, and a *MissingError that counts them.
func (c *Client) WaitAll(ctx context.Context, ids []string) (recs []*task.Record, err error) {
	recs = make([]*task.Record, len(ids))
	for i, id := range ids {
		rec, werr := c.Wait(ctx, id)
		if werr == nil {
			recs[i] = rec
			continue
		}
		if err == nil {
			err = werr
		}
		if ctx.Err() == nil && !errors.Is(werr, ErrClosed) {
			continue // ErrReturned: keep waiting for the others
		}
		// Collect what is there without waiting.
		for j := i + 1; j < len(ids); j++ {
			recs[j], _ = c.tab.take(ids[j])
		}
		break
	}
	if err == nil {
		return recs, nil
	}
	missing := 0
	for _, r := range recs {
		if r == nil {
			missing++
		}
	}
	return recs, &MissingError{Missing: missing, Total: len(ids), Err: err}
}
