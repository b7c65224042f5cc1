package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/crash"
	"github.com/inferq/inferq/logclip"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/results"
	"github.com/inferq/inferq/shard"
	"github.com/inferq/inferq/tensor"
	"go.opentelemetry.io/otel/trace"
)

// Batcher takes one item into a model's dynamic batcher; once Enqueue
// accepts it, the request's Owner hears RunStarting right before its run
// (if it runs) and Finished once, with the result in the request (see
// batch.Owner). *batch.Batcher satisfies it.
type Batcher interface {
	Enqueue(ctx context.Context, r *batch.Request) error
}

// Store stores a result record durably (broker or spool) before it
// returns. *results.Store satisfies it.
type Store interface {
	Put(ctx context.Context, e results.Entry) error
	Get(taskID string) ([]byte, bool)
}

// Broker is what the queue loop needs of the broker: pollers that hand it
// messages (Deliver), the sends that settling makes, events, and queue
// depths. Conn adapts an *mq.Conn; an in-memory fake drives the loop in
// tests. Sync queries and shards need more of it (QuerySubscriber,
// shard.Events), found by type assertion.
type Broker interface {
	EventSender
	NewPoller(cfg mq.PollerConfig) (Poller, error)
	Sender() Sender
	QueuesInfo(ctx context.Context, filter string) (map[string]mq.QueueInfo, error)
}

// Poller consumes one channel, handing each polled batch to its config's
// Deliver, until Run's ctx ends and what it delivered is settled. Up and
// Stats are safe for concurrent use. *mq.Poller satisfies it.
type Poller interface {
	Run(ctx context.Context) error
	Up() bool
	Stats() mq.PollerStats
}

// Sender is what settling sends: tasks moved between shards, and the
// copies that a retry, a dead letter and an unprocessable forward make
// before settle acks the message. *mq.Sender satisfies it.
type Sender interface {
	Send(ctx context.Context, msgs ...mq.OutMessage) error
	SendRetry(ctx context.Context, m *mq.Message, delay time.Duration, attempt int) error
	SendCopy(ctx context.Context, m *mq.Message, channel string, extra map[string]string) error
	SendDeadLetter(ctx context.Context, m *mq.Message, dlq, reason string, attempts int) error
}

// Conn is c as the queue loop's Broker. Its other abilities (queries,
// events store subscriptions) stay reachable by type assertion.
func Conn(c *mq.Conn) Broker { return conn{c} }

type conn struct{ *mq.Conn }

func (c conn) NewPoller(cfg mq.PollerConfig) (Poller, error) { return c.Conn.NewPoller(cfg) }
func (c conn) Sender() Sender                                { return c.Conn.Sender() }
func (c conn) EventStream(rejected func(error)) EventStream {
	return c.Conn.NewEventStream(rejected)
}

var (
	_ Poller      = (*mq.Poller)(nil)
	_ Sender      = (*mq.Sender)(nil)
	_ EventStream = (*mq.EventStream)(nil)
)

// Model is one served model as the consumer sees it.
type Model struct {
	Config  models.Model
	Info    tensor.ModelInfo
	Batcher Batcher
	// Version is reported as model_version in results ("1" when empty).
	Version string
	met     *modelMetrics // set by New
	pol     *queuePolicy  // set by New

	// MaxInFlight is how many of its tasks may be taken and unsettled at
	// once, from its placement (runtime.Placement.MaxInFlight: 4 full
	// batches per run loop on every device); 0 derives it from the config
	// alone.
	MaxInFlight int
}

// version is the model_version of a result: ran, the version the batcher
// says ran it (batch.Request.Version, set by a model repository's
// batcher), else m.Version.
func (m *Model) version(ran string) string {
	if ran != "" {
		return ran
	}
	return m.Version
}

// Config configures a Server.
type Config struct {
	Broker Broker
	Store  Store
	Models []Model
	// Journal counts crash attempts; nil keeps a memory-only one.
	Journal *crash.Journal
	// Crash shares crash counts with the other replicas of each queue
	// (crash.Fleet) when its Events is set; nil Events: this process's
	// journal alone counts. Its Reporter, Now and Logger default to
	// Worker, Now and Logger.
	Crash   crash.FleetConfig
	Metrics *Metrics
	Logger  *slog.Logger
	// Worker names this process in result records (host name by default
	// in cmd).
	Worker string
	// AdvertiseURL (models.HTTP.AdvertiseURL, validated there) prefixes
	// an oversized result's result_ref: <AdvertiseURL>/v1/tasks/<id>, the
	// replica whose store holds the whole record. "": the relative
	// /v1/tasks/<id>.
	AdvertiseURL string
	// AlertWebhook, when set, receives a POST per dead-lettered task.
	AlertWebhook        string
	AlertWebhookTimeout time.Duration
	// IntakeWorkers decode tasks in parallel (default 4).
	IntakeWorkers int
	// Writers store results and settle messages in parallel; a store can
	// block on broker retries, so there are many (default 128).
	Writers int
	// PollMaxItems caps one stream poll (default 256; on a sharded
	// queue's channels at most half of MaxInFlight, see newPoller). A busy
	// channel is polled one batch at a time (mq.Poller), so each poll is
	// one serial cycle of runs and of the broker's part (store, ack, the
	// next poll), for which the devices idle: a larger poll spreads that
	// part over more runs (BENCHMARKS.md, 2026-12-06 fourth session).
	// MaxInFlight caps messages taken and not settled per queue (default
	// 4 x max batch x instances, at least 256).
	PollMaxItems int
	MaxInFlight  int
	// PollFollowWithin: a queue whose lone tasks come within this of the
	// last completion is polled at once after each completion, on the
	// same stream, instead of peeked (mq.PollerConfig.FollowWithin);
	// 0: mq's default (10 ms), negative: never.
	PollFollowWithin time.Duration
	// ProgressBuffer bounds queued progress events (default 4096).
	ProgressBuffer int
	// DrainTimeout bounds the wait for in-flight work after Run's ctx ends
	// (the --shutdown-grace; default 30 s).
	DrainTimeout time.Duration
	// QueryGroup is the group every queue's query subscription joins, so
	// that the servers of a queue share its queries, each answered once
	// (default DefaultQueryGroup). NoQueries turns the query responder off.
	QueryGroup string
	NoQueries  bool
	// TracerProvider, when set, traces tasks and sync requests (see
	// SpanReceive); nil or a no-op provider: no tracing, no cost.
	TracerProvider trace.TracerProvider
	// DepthEvery is how often inferq_queue_depth is refreshed (default 5 s).
	DepthEvery time.Duration
	// StoreFull, when set, reports that the result store can take no more
	// records without going past its bounds (*results.Store's Full): while
	// it does, the pollers take no new messages (a batch already polled
	// waits, unsettled, and goes on once there is room) and Ready is
	// false. It is called often and must be cheap. nil: never full.
	StoreFull func() bool
	// StoreFullCheck is how often a paused poller asks StoreFull again
	// (default 100 ms).
	StoreFullCheck time.Duration
	// QueueShards spreads every queue over that many channels (package
	// shard): shard 0 is the queue's own name, shard i its name +
	// ".shard-i". Each replica polls only the shards it owns among the
	// replicas it hears on <queue>.members (ShardEvents), so that no two
	// replicas poll one channel (KUBEMQ.md traps 12, 13). Producers that
	// know the count spread tasks over the shards; the others send to
	// shard 0. 0 or 1: the queue alone, polled by every replica.
	QueueShards int
	// Pipeline lets a replica alone on a sharded queue move the queue's
	// own channel into its shards while that keeps its devices busier
	// (pipe.go). Off by default: on KubeMQ v2.4.0 moved copies are often
	// stranded for a second and now and then for good (KUBEMQ.md facts 43,
	// 37), which no measured gain pays for.
	Pipeline bool
	// ShardEvents carries the replicas' heartbeats; required with
	// QueueShards > 1. *mq.Conn satisfies it.
	ShardEvents shard.Events
	// ShardBeat is how often a replica announces itself (default 1 s; a
	// replica not heard for 5 beats is gone).
	ShardBeat time.Duration
	// Now is the clock (tests).
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.IntakeWorkers <= 0 {
		c.IntakeWorkers = 4
	}
	if c.Writers <= 0 {
		c.Writers = 128
	}
	if c.PollMaxItems <= 0 {
		c.PollMaxItems = 256
	}
	if c.ProgressBuffer <= 0 {
		c.ProgressBuffer = 4096
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 30 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.DepthEvery <= 0 {
		c.DepthEvery = 5 * time.Second
	}
	if c.StoreFullCheck <= 0 {
		c.StoreFullCheck = 100 * time.Millisecond
	}
	if c.Worker == "" {
		c.Worker = "inferq"
	}
	if c.QueryGroup == "" {
		c.QueryGroup = DefaultQueryGroup
	}
	if c.QueueShards > 1 && c.ShardEvents == nil {
		if ev, ok := c.Broker.(shard.Events); ok {
			c.ShardEvents = ev
		}
	}
}

// fleetConfig is Crash, its Reporter, Now and Logger defaulting to
// Worker, Now and log.
func (c *Config) fleetConfig(log *slog.Logger) crash.FleetConfig {
	fc := c.Crash
	if fc.Reporter == "" {
		fc.Reporter = c.Worker
	}
	if fc.Now == nil {
		fc.Now = c.Now
	}
	if fc.Logger == nil {
		fc.Logger = log
	}
	return fc
}

// Validate reports what is missing.
func (c *Config) Validate() error {
	switch {
	case c.Broker == nil:
		return errors.New("consumer: no broker")
	case c.Store == nil:
		return errors.New("consumer: no result store")
	case len(c.Models) == 0:
		return errors.New("consumer: no model")
	}
	for _, m := range c.Models {
		if m.Batcher == nil {
			return fmt.Errorf("consumer: model %q: no batcher", m.Config.Name)
		}
	}
	if c.QueueShards < 0 || c.QueueShards > 1 {
		if err := shard.Validate(c.QueueShards); err != nil {
			return fmt.Errorf("consumer: %w", err)
		}
		if c.ShardEvents == nil {
			return errors.New("consumer: queue shards without ShardEvents")
		}
	}
	return nil
}

// queue is one consumed queue and the models routed from it by task_name.
type queue struct {
	name  string
	table atomic.Pointer[modelTable] // replaced whole when models come and go
	// chans are the queue's channels: the queue itself, or its shards
	// (Config.QueueShards), shard 0 first.
	chans []*channel
	// split: a sharded queue's members are known and its shards split
	// (runShards); until then the server is not ready.
	split atomic.Bool
	// spread moves shard 0's polls to the other shards while other
	// replicas serve the queue (spread.go).
	spread *spreader
	// undecided counts its messages handed to intake and not yet
	// admitted; room is told when they are, or when a pending request of
	// its models starts or leaves (see waitQueueRoom).
	undecided atomic.Int64
	// arriving counts its pollers' deliveries under way and their
	// messages not yet admitted. When it drops to zero, all that was
	// polled is in its models' batchers, which are flushed: a poll is a
	// batch, and the next tasks come only with the next poll.
	arriving atomic.Int64
	room     chan struct{}
	stop     context.CancelFunc // ends its pollers and query subscription (dynamic.go)
}

// newQueue returns the queue called name over shards channels (1: the
// queue alone), routing to no model yet.
func newQueue(name string, shards int) *queue {
	q := &queue{name: name, room: make(chan struct{}, 1), spread: &spreader{}}
	for _, ch := range shard.Channels(name, shards) {
		q.chans = append(q.chans, &channel{name: ch})
	}
	q.table.Store(newModelTable("queue " + name))
	return q
}

// policy is m's queue policy (batching.max_queue_size,
// default_queue_timeout) on q.
func (s *Server) policy(m *Model, q *queue) *queuePolicy {
	return &queuePolicy{model: m.Config.Name, max: int64(m.Config.Batching.MaxQueueSize),
		timeout: m.Config.Batching.DefaultQueueTimeout.D(), gauge: s.met.Pending.WithLabelValues(m.Config.Name), q: q}
}

// decided counts a message of q out of intake.
func (q *queue) decided() {
	q.undecided.Add(-1)
	q.arrived()
	q.wake()
}

// arrived counts a delivery or a message of q out of arriving, and
// flushes the batchers of q's models when nothing more is (see arriving).
func (q *queue) arrived() {
	if q.arriving.Add(-1) != 0 {
		return
	}
	for _, m := range q.table.Load().Models() {
		if f, ok := m.Batcher.(flusher); ok {
			f.Flush()
		}
	}
}

// flusher is a Batcher that can be told that nothing more is on its way
// for the requests it holds, so that they do not wait out
// max_queue_delay (batch.Batcher.Flush).
type flusher interface{ Flush() }

// wake tells waitQueueRoom to look again.
func (q *queue) wake() {
	select {
	case q.room <- struct{}{}:
	default:
	}
}

// Server consumes every configured queue. Create it with New, start it with
// Run; its methods are safe for concurrent use.
type Server struct {
	cfg     Config
	log     *slog.Logger
	met     *Metrics
	sender  Sender
	journal *crash.Journal
	fleet   *crash.Fleet // nil: crash counts are not shared
	// memberID is this replica's id among a sharded queue's members
	// (memberID).
	memberID string
	// pipeWindow is how long a lone replica measures its devices' busy
	// share before deciding on pipelining (pipe.go).
	pipeWindow time.Duration
	pub        *publisher
	alert      *alerter
	trace      tracing
	queues     []*queue                   // guarded by dyn.mu once Run runs
	models     atomic.Pointer[modelTable] // every model, for HTTP
	dyn        dynamic                    // models added and removed while running

	intake chan *delivery
	write  chan *job

	holds    sync.WaitGroup // crash holds (holdThenRun) in progress
	stopping chan struct{}  // closed when Run's ctx ends

	inflight atomic.Int64
}

// delivery is a message on its way through intake.
type delivery struct {
	q        *queue
	msg      *mq.Message
	received time.Time
	returned bool // given back by another consumer (returnedTo): runs alone
}

// New checks cfg and builds the per-queue routing.
func New(cfg Config) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: logclip.Logger(cfg.Logger), met: cfg.Metrics, sender: cfg.Broker.Sender(), journal: cfg.Journal}
	if s.met == nil {
		return nil, errors.New("consumer: no metrics")
	}
	if s.journal == nil {
		s.journal, _ = crash.OpenJournal("")
	}
	s.memberID = memberID(s.journal)
	s.pipeWindow = pipeWindow
	s.pub = newPublisher(cfg.Broker, cfg.ProgressBuffer, s.met.ProgressEvents.Inc, s.met.ProgressDrops.Inc, s.log)
	s.alert = newAlerter(s.pub, cfg.AlertWebhook, cfg.AlertWebhookTimeout, s.met.AlertDrops.Inc, s.log)
	s.trace = newTracing(cfg.TracerProvider)
	all := newModelTable("this server")
	s.models.Store(all)
	byQueue := map[string]*queue{}
	maxInFlight := 256
	for i := range cfg.Models {
		m := &cfg.Models[i]
		if m.Version == "" {
			m.Version = "1"
		}
		m.met = s.met.forModel(m.Config.Name)
		q := byQueue[m.Config.Queue]
		if q == nil {
			q = newQueue(m.Config.Queue, s.cfg.QueueShards)
			byQueue[q.name] = q
			s.queues = append(s.queues, q)
		}
		m.pol = s.policy(m, q)
		if err := q.table.Load().Add(m); err != nil {
			return nil, fmt.Errorf("consumer: %w", err)
		}
		if _, served := all.Model(m.Config.Name); !served {
			_ = all.Add(m) // HTTP names a model; the first of a name serves it
		}
		if m.MaxInFlight > 0 {
			maxInFlight = max(maxInFlight, m.MaxInFlight)
		} else {
			maxInFlight = max(maxInFlight, 4*m.Config.Batching.MaxBatchSize*m.Config.Instances*m.Config.Concurrency)
		}
	}
	if cfg.MaxInFlight <= 0 {
		s.cfg.MaxInFlight = maxInFlight
	}
	names := make([]string, len(s.queues))
	for i, q := range s.queues {
		names[i] = q.name
	}
	s.fleet = crash.NewFleet(s.cfg.fleetConfig(s.log), s.journal, names)
	s.stopping = make(chan struct{})
	s.intake = make(chan *delivery, s.cfg.MaxInFlight)
	s.write = make(chan *job, s.cfg.MaxInFlight)
	for _, q := range s.queues {
		if err := s.newPollers(q); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// newPollers builds a poller for each of q's channels.
func (s *Server) newPollers(q *queue) error {
	for _, ch := range q.chans {
		p, err := s.newPoller(q, ch)
		if err != nil {
			return err
		}
		ch.use(p)
	}
	return nil
}

// newPoller builds a poller of q's channel ch.
func (s *Server) newPoller(q *queue, ch *channel) (Poller, error) {
	items := s.cfg.PollMaxItems
	if len(q.chans) > 1 {
		// The owner of shard 0 moves each poll of it whole into a
		// replica's shards with room for it (spread.go): a poll larger
		// than half that room would move only into empty shards, and
		// the replicas would idle between moves (polls of 256 with a
		// room of 256: two replicas served a third of what they did).
		// The shards take moves of that size, and a shard poll larger
		// than it overlaps an open batch more often (the Poller
		// overlaps while no more waits than a poll takes), which on
		// KubeMQ cost a fleet 1 s short polls (BENCHMARKS.md,
		// 2026-12-06 fourth session).
		items = min(items, max(s.cfg.MaxInFlight/2, 1))
	}
	p, err := s.cfg.Broker.NewPoller(mq.PollerConfig{
		Channel: ch.name,
		Deliver: func(ctx context.Context, batch []*mq.Message) error {
			deliver := s.deliverWhenRoom
			if ch == q.chans[0] && len(q.chans) > 1 {
				s.pipe(q)
				if q.spread.active() {
					deliver = s.spread
				}
			}
			taken, err := deliver(ctx, q, ch, batch)
			s.refuse(ctx, batch[taken:], err)
			return err
		},
		MaxItems:     items,
		FollowWithin: s.cfg.PollFollowWithin,
		MaxInFlight:  s.cfg.MaxInFlight,
		DrainTimeout: s.cfg.DrainTimeout,
		OnState:      func(up bool, err error) { s.brokerState(ch.name, up, err) },
		OnSettleError: func(err error) {
			s.met.SettleErrors.Inc()
			s.log.Warn("settle failed", "queue", ch.name, "err", err)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("consumer: poller for %s: %w", ch.name, err)
	}
	return p, nil
}

// Ready reports whether the server takes tasks: the broker answers every
// queue's poller (within its bound, mq.PollerConfig.AnswerWithin) and the
// result store has room (StoreFull).
func (s *Server) Ready() bool {
	return s.BrokerAnswers() && !s.StoreFull()
}

// BrokerAnswers reports whether every queue's poller hears from the
// broker.
func (s *Server) BrokerAnswers() bool {
	for _, q := range s.queueList() {
		if len(q.chans) == 1 {
			if !q.chans[0].current().Up() {
				return false
			}
			continue
		}
		// A sharded queue: its shards are split, and the pollers of
		// those this server owns answer.
		if !q.split.Load() {
			return false
		}
		for _, ch := range q.chans {
			if ch.runs.Load() > 0 && !ch.current().Up() {
				return false
			}
		}
	}
	return true
}

// StoreFull reports whether the result store is full (Config.StoreFull):
// the pollers take no new messages until it has room.
func (s *Server) StoreFull() bool { return s.cfg.StoreFull != nil && s.cfg.StoreFull() }

// deliverWhenRoom is each Poller's Deliver: the batch goes to intake once
// the result store has room, each message once its models have room
// (max_queue_size, waitQueueRoom). It returns how many it handed over;
// the rest are refused (settle's refuse ends them).
func (s *Server) deliverWhenRoom(ctx context.Context, q *queue, ch *channel, batch []*mq.Message) (int, error) {
	if err := s.waitStoreRoom(ctx, q); err != nil {
		return 0, err
	}
	return s.deliver(ctx, q, ch, batch)
}

// waitStoreRoom holds a polled batch while the result store is full. The
// Poller polls no more while Deliver blocks, so this pauses the queue
// without a hook in the Poller: at most the one batch in hand waits,
// unsettled. It returns ctx's error when ctx ends first (refuse then
// gives the batch back to the queue uncounted).
func (s *Server) waitStoreRoom(ctx context.Context, q *queue) error {
	if !s.StoreFull() {
		return nil
	}
	s.log.Debug("result store full; queue paused", "queue", q.name)
	t := time.NewTicker(s.cfg.StoreFullCheck)
	defer t.Stop()
	for s.StoreFull() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	s.log.Debug("result store has room; queue resumed", "queue", q.name)
	return nil
}

// PollerStats reports the poller counters of each channel (a queue, or
// a shard of one), by channel; a shard's are its current poller's.
func (s *Server) PollerStats() map[string]mq.PollerStats {
	qs := s.queueList()
	out := make(map[string]mq.PollerStats, len(qs))
	for _, q := range qs {
		for _, ch := range q.chans {
			out[ch.name] = ch.current().Stats()
		}
	}
	return out
}

// Inflight is the number of messages taken and not yet settled.
func (s *Server) Inflight() int64 { return s.inflight.Load() }

func (s *Server) brokerState(queue string, up bool, err error) {
	if up {
		s.met.BrokerUp.Set(1)
		s.log.Info("broker reachable", "queue", queue)
		return
	}
	s.met.BrokerUp.Set(0)
	s.log.Warn("broker unreachable; retrying", "queue", queue, "err", err)
}

// Run consumes until ctx ends, then stops polling, lets what was taken
// finish within DrainTimeout (the pollers give back what is still unsettled
// after it, uncounted), and returns.
func (s *Server) Run(ctx context.Context) error {
	// Stages behind the pollers outlive ctx so that taken work can finish.
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	var stages sync.WaitGroup
	stages.Add(2)
	go func() { defer stages.Done(); s.pub.run(work) }()
	go func() { defer stages.Done(); s.sampleDepth(ctx) }()
	var fleet sync.WaitGroup
	fleet.Add(1)
	go func() { defer fleet.Done(); s.fleet.Run(work) }()
	var intakeWG, writeWG sync.WaitGroup
	for range s.cfg.IntakeWorkers {
		intakeWG.Add(1)
		go func() { defer intakeWG.Done(); s.intakeLoop(work) }()
	}
	for range s.cfg.Writers {
		writeWG.Add(1)
		go func() { defer writeWG.Done(); s.writeLoop(work) }()
	}
	s.startQueues(ctx)
	s.log.Info("consuming", "queues", len(s.queueList()), "models", len(s.modelList()))
	<-ctx.Done()
	close(s.stopping)
	s.log.Info("stopping: no new tasks; finishing what was taken", "inflight", s.inflight.Load(), "grace", s.cfg.DrainTimeout)
	// Pollers return once everything they delivered is settled, or after
	// DrainTimeout with the rest given back to the queue.
	errs := s.waitQueues()
	s.holds.Wait()
	stopWork()
	intakeWG.Wait()
	writeWG.Wait()
	fleet.Wait()
	s.alert.wait()
	stages.Wait()
	return errs
}

// sampleDepth keeps inferq_queue_depth current for every served queue
// until ctx ends (one QueuesInfo call for all of them: ~10 ms on a broker
// with thousands of channels).
func (s *Server) sampleDepth(ctx context.Context) {
	t := time.NewTicker(s.cfg.DepthEvery)
	defer t.Stop()
	for {
		qs := s.queueList() // models come and go (dynamic.go)
		var names []string
		for _, q := range qs {
			for _, ch := range q.chans {
				names = append(names, ch.name)
			}
		}
		filter := mq.InfoFilter(names...)
		qctx, cancel := context.WithTimeout(ctx, s.cfg.DepthEvery)
		info, err := s.cfg.Broker.QueuesInfo(qctx, filter)
		cancel()
		if err == nil {
			for _, q := range qs {
				var depth int64 // the shards' sum
				for _, ch := range q.chans {
					c, _ := mq.LookupInfo(info, ch.name)
					depth += c.Waiting
				}
				s.met.QueueDepth.WithLabelValues(q.name).Set(float64(depth))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
