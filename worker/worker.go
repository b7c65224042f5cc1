package worker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/crash"
	"github.com/inferq/inferq/datadir"
	"github.com/inferq/inferq/logclip"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/oip"
	"github.com/inferq/inferq/results"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
)

// flushTimeout bounds the HTTP shutdown and the result spool's write to
// disk after the consumer stopped and the spool was flushed to the broker.
const flushTimeout = 10 * time.Second

// DefaultSpoolFlushTimeout is Config.SpoolFlushTimeout's default.
const DefaultSpoolFlushTimeout = 20 * time.Second

// Config is one worker: a broker connection, the models it consumes and
// the settings of its consumer, result store and HTTP handler.
type Config struct {
	// Broker is the connection every part shares.
	Broker mq.Config
	// Models are consumed, each from its configured queue. The result
	// store takes the first model's result.channel_prefix and
	// result.expiry for all (a warning names the models that differ) and
	// the largest max_result_bytes.
	Models []consumer.Model
	// Batchers run from Run's start until the consumer has drained.
	Batchers []*batch.Batcher
	// DataDir holds the result spool (results/) and the attempt journal
	// (journal/). The worker holds it exclusively (datadir.Acquire) from
	// New until Run returns: a second process on it gets a
	// datadir.LockedError. "" keeps the journal in memory and needs
	// the memory spool (Results.Spool).
	DataDir string
	// Results is the result spool's mode and bounds. Spool memory
	// (models.SpoolMemory) keeps it in memory only, an explicit choice:
	// records the broker has not taken are lost when the process ends,
	// and the store warns at startup; "" is disk. Zero bounds take the
	// defaults.
	Results models.Results
	// Consumer holds the consumer's settings; New sets its Broker, Store,
	// Models, Journal and Logger, and its Metrics when nil (on Registry).
	Consumer consumer.Config
	// Registry receives the result store's metrics and is served on
	// /metrics; nil: a private one.
	Registry *prometheus.Registry
	// HTTP is the HTTP handler's (health, metrics, task lookup, Open
	// Inference Protocol) listen address ("": no listener), timeouts,
	// infer concurrency cap, bearer token and TLS files; zero timeouts and
	// cap take models' defaults (models.HTTP.SetDefaults).
	HTTP models.HTTP
	// GRPC is the Open Inference Protocol's gRPC listener ("" Listen: none;
	// see grpc.go); it takes HTTP's bearer token.
	GRPC models.GRPC
	// Devices maps each model to its devices, for /v1/models.
	Devices map[string][]string
	Logger  *slog.Logger
	// SpoolFlushTimeout bounds the wait, once the consumer has stopped,
	// for the result spool's records to reach the broker (a replica
	// scaled down leaves nothing behind it). What is still spooled then
	// stays in DataDir for the next process on it (logged with counts;
	// Run returns no error for it), or is lost with the memory spool (Run
	// returns results.ErrNotFlushed). 0: DefaultSpoolFlushTimeout;
	// negative: no wait.
	SpoolFlushTimeout time.Duration

	// Background runs beside the batchers, with the same life: from Run's
	// start until the consumer has drained (a model repository's batchers
	// and poll loop).
	Background []func(context.Context) error
	// Routes are more HTTP handlers, by mux pattern, behind the same
	// bearer token (the model repository extension).
	Routes map[string]http.Handler
	// Repository, optional, answers the gRPC endpoint's model repository
	// RPCs (RepositoryIndex, RepositoryModelLoad, RepositoryModelUnload),
	// the gRPC side of Routes.
	Repository oip.ModelRepository
	// Journal is the attempt journal's config; New sets its Dir
	// (DataDir/journal, or "" for memory) and its Logger. Tests set its
	// WrapWriter (a full disk).
	Journal crash.JournalConfig
	// LocalCrashCounts keeps crash counts to this process's journal: no
	// crash reports are shared with the queue's other replicas
	// (consumer.Config.Crash.Events stays nil).
	LocalCrashCounts bool
}

// Worker is one assembled inferq worker. Build it with New and call Run
// once: Run releases everything New acquired.
type Worker struct {
	cfg     Config
	log     *slog.Logger
	conn    *mq.Conn
	store   *results.Store
	journal *crash.Journal
	dirLock *datadir.Lock
	srv     *consumer.Server
	met     *consumer.Metrics // the consumer's, which the HTTP and gRPC endpoints count into too
	lis     net.Listener
	hs      *http.Server
	glis    net.Listener // the gRPC listener (grpc.go)
	gs      *grpc.Server
}

// New dials the broker and builds the result store, the journal, the
// consumer and, with HTTP.Listen, the HTTP listener. On error it releases
// what it built.
func New(ctx context.Context, cfg Config) (w *Worker, err error) {
	if len(cfg.Models) == 0 {
		return nil, errors.New("worker: no models")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	w = &Worker{cfg: cfg, log: logclip.Logger(cfg.Logger)} // its components log wire data
	for _, step := range []func(context.Context) error{w.lockDataDir, w.dial, w.openStore, w.openJournal, w.newConsumer, w.listen, w.listenGRPC} {
		if err := step(ctx); err != nil {
			w.release() // not deferred: returning nil sets w to nil first
			return nil, err
		}
	}
	return w, nil
}

// lockDataDir takes the data dir before anything in it is opened: the
// result store removes the .tmp files it finds at start, and two spools or
// journals on one directory overwrite each other's files.
func (w *Worker) lockDataDir(context.Context) error {
	if w.cfg.DataDir == "" {
		return nil
	}
	l, err := datadir.Acquire(w.cfg.DataDir)
	if err != nil {
		return err
	}
	w.dirLock = l
	return nil
}

func (w *Worker) dial(ctx context.Context) error {
	bc := w.cfg.Broker
	bc.Logger = w.log.With("component", "mq")
	conn, err := mq.Dial(context.WithoutCancel(ctx), bc)
	if err != nil {
		return fmt.Errorf("broker %s: %w", bc.Address, err)
	}
	w.conn = conn
	w.log.Info("broker client started; consuming starts when the broker answers", "addr", bc.Address)
	return nil
}

// openStore builds the one result store every model shares.
func (w *Worker) openStore(context.Context) error {
	r := resultSettings(w.cfg.Models, w.log)
	dir := ""
	memory := w.cfg.Results.Spool == models.SpoolMemory
	if w.cfg.DataDir != "" && !memory {
		dir = filepath.Join(w.cfg.DataDir, "results")
	}
	store, err := results.New(results.Config{
		Broker: ResultsBroker(w.conn), Logger: w.log.With("component", "results"),
		DataDir: dir, MemoryOnly: memory, BrokerAway: brokerAway,
		SpoolEntries: w.cfg.Results.SpoolMaxEntries, SpoolMemoryBytes: w.cfg.Results.SpoolMaxMemoryBytes,
		SpoolDiskBytes: w.cfg.Results.SpoolMaxDiskBytes,
		ResultPrefix:   r.ChannelPrefix, Expiry: r.Expiry.D(), MaxResultBytes: r.MaxResultBytes,
	})
	if err != nil {
		return fmt.Errorf("result store: %w", err)
	}
	w.store = store
	return w.registerStoreMetrics()
}

// brokerAway tells the result store's replay that the broker itself is
// away (the whole pass waits) rather than one record's channel failing
// (that task alone waits).
func brokerAway(err error) bool {
	return errors.Is(err, mq.ErrUnavailable) || errors.Is(err, mq.ErrClosed) || errors.Is(err, context.DeadlineExceeded)
}

// resultSettings applies "the first model's result settings win": one
// store serves every model, so its compat channel prefix and expiry are
// the first model's; each model's max_result_bytes is applied by the
// consumer (it gives the store a substitute), the store's is the largest.
func resultSettings(ms []consumer.Model, log *slog.Logger) models.Result {
	r0 := ms[0].Config.Result
	for _, m := range ms[1:] {
		if m.Config.Result.ChannelPrefix != r0.ChannelPrefix || m.Config.Result.Expiry != r0.Expiry {
			log.Warn("models differ in result.channel_prefix or result.expiry; the first model's are used for all", "model", m.Config.Name)
		}
		r0.MaxResultBytes = max(r0.MaxResultBytes, m.Config.Result.MaxResultBytes)
	}
	return r0
}

// storeMetrics are the result store's metrics, each read from its Stats.
var storeMetrics = []struct {
	name, help string
	counter    bool
	value      func(results.Stats) float64
}{
	{"inferq_result_store_retries_total", "Broker writes of result records that were retried.", true,
		func(s results.Stats) float64 { return float64(s.Retries) }},
	{"inferq_result_spool_entries", "Result records waiting in the spool for the broker.", false,
		func(s results.Stats) float64 { return float64(s.Pending) }},
	{"inferq_result_spool_full", "1 while the result spool is full: no new tasks are taken.", false,
		func(s results.Stats) float64 { return b2f(s.Full) }},
	{"inferq_result_spool_memory_only", "Spooled result records in memory only (no disk spool, or the disk refused them).", false,
		func(s results.Stats) float64 { return float64(s.MemoryOnly) }},
	{"inferq_result_spool_undeliverable", "Result records the broker refused for good, kept for /v1/tasks/{id}.", false,
		func(s results.Stats) float64 { return float64(s.Undeliverable) }},
	{"inferq_result_store_undeliverable_total", "Result records the broker refused for good.", true,
		func(s results.Stats) float64 { return float64(s.Parked) }},
	{"inferq_result_store_withheld_total", "Result records behind the producer's CANCELLED (another writer's final record) on their per-task channel, where no reader sees them; each is kept for lookups.", true,
		func(s results.Stats) float64 { return float64(s.Withheld) }},
	{"inferq_result_spool_disk_errors_total", "Failed reads and writes of the disk result spool.", true,
		func(s results.Stats) float64 { return float64(s.DiskErrors) }},
	{"inferq_result_spool_lost_total", "Spooled result records lost to a corrupt or missing spool file.", true,
		func(s results.Stats) float64 { return float64(s.Dropped) }},
	{"inferq_result_spool_evicted_total", "Whole oversize records (the broker holds their substitute) dropped to make room.", true,
		func(s results.Stats) float64 { return float64(s.Evicted) }},
}

func (w *Worker) registerStoreMetrics() error {
	store := w.store
	for _, m := range storeMetrics {
		read := func() float64 { return m.value(store.Stats()) }
		var c prometheus.Collector
		if m.counter {
			c = prometheus.NewCounterFunc(prometheus.CounterOpts{Name: m.name, Help: m.help}, read)
		} else {
			c = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: m.name, Help: m.help}, read)
		}
		if err := w.cfg.Registry.Register(c); err != nil {
			return fmt.Errorf("result store metric %s: %w", m.name, err)
		}
	}
	return nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (w *Worker) openJournal(context.Context) error {
	dir := ""
	if w.cfg.DataDir != "" {
		dir = filepath.Join(w.cfg.DataDir, "journal")
	}
	jc := w.cfg.Journal
	jc.Dir, jc.Logger = dir, w.log.With("component", "journal")
	j, err := crash.NewJournal(jc)
	if err != nil {
		return err
	}
	w.journal = j
	return w.registerJournalMetrics()
}

// registerJournalMetrics registers the attempt journal's health, read
// from its Stats at each scrape (which lets a failing journal retry a
// write).
func (w *Worker) registerJournalMetrics() error {
	j := w.journal
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "inferq_journal_write_failing",
			Help: "1 while the attempt journal's last write failed (data dir full?): tasks run, but a crash during one may not be counted; /readyz fails."},
			func() float64 { return b2f(j.Stats().Failing) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "inferq_journal_write_errors_total",
			Help: "Writes of the attempt journal the disk refused."},
			func() float64 { return float64(j.Stats().WriteErrors) }),
	} {
		if err := w.cfg.Registry.Register(c); err != nil {
			return fmt.Errorf("attempt journal metrics: %w", err)
		}
	}
	return nil
}

func (w *Worker) newConsumer(context.Context) error {
	cc := w.cfg.Consumer
	cc.Broker, cc.Store, cc.Models, cc.Journal = consumer.Conn(w.conn), w.store, w.cfg.Models, w.journal
	if cc.Crash.Events == nil && !w.cfg.LocalCrashCounts {
		cc.Crash.Events = w.conn // the fleet's crash budget (crash.Fleet)
	}
	if err := w.crashReports(&cc.Crash); err != nil {
		return err
	}
	if cc.ShardEvents == nil && cc.QueueShards > 1 {
		cc.ShardEvents = w.conn // the replicas of a sharded queue (package shard)
	}
	cc.StoreFull = w.store.Full // a full spool stops intake and readiness
	cc.Logger = w.log.With("component", "consumer")
	if cc.Metrics == nil {
		met, err := consumer.NewMetrics(w.cfg.Registry)
		if err != nil {
			return fmt.Errorf("consumer metrics: %w", err)
		}
		cc.Metrics = met
	}
	srv, err := consumer.New(cc)
	if err != nil {
		return err
	}
	w.srv, w.met = srv, cc.Metrics
	return nil
}

// crashReports checks the fleet key, warns once when the fleet's crash
// reports are not signed, and counts refused reports in
// inferq_crash_reports_refused_total{reason}.
func (w *Worker) crashReports(fc *crash.FleetConfig) error {
	if len(fc.Key) > 0 {
		if err := crash.CheckKey(fc.Key); err != nil {
			return err
		}
	} else if fc.Events != nil {
		w.log.Warn("crash reports are not signed: anyone who can publish on a queue's <queue>.crashes channel can spend its tasks' crash budgets " +
			"(and send them to the dead letter queue unrun); give every replica the same fleet key (--crash-key-file or INFERQ_CRASH_KEY)")
	}
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "inferq_crash_reports_refused_total",
		Help: "Fleet crash reports refused, by reason: malformed, or with a fleet key unsigned, forged or stale (a replay)."}, []string{"reason"})
	for _, r := range crash.RefusedReasons() {
		refused.WithLabelValues(r)
	}
	if err := w.cfg.Registry.Register(refused); err != nil {
		return fmt.Errorf("crash report metrics: %w", err)
	}
	next := fc.Refused
	fc.Refused = func(reason string) {
		refused.WithLabelValues(reason).Inc()
		if next != nil {
			next(reason)
		}
	}
	return nil
}

func (w *Worker) listen(context.Context) error {
	h := w.cfg.HTTP
	addr := h.Listen
	if addr == "" {
		return nil
	}
	h.SetDefaults()
	token, err := h.Token()
	if err != nil {
		return err
	}
	var tlsConf *tls.Config
	if h.TLSCert != "" || h.TLSKey != "" {
		cert, err := tls.LoadX509KeyPair(h.TLSCert, h.TLSKey)
		if err != nil {
			return fmt.Errorf("http.tls_cert %s, http.tls_key %s: %w", h.TLSCert, h.TLSKey, err)
		}
		tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("http: listen on %s: %w", addr, err)
	}
	w.lis = lis
	w.hs = &http.Server{
		Handler: oip.Handler(w.srv, oip.HTTPConfig{Gatherer: w.cfg.Registry, Metrics: w.met, Devices: w.cfg.Devices,
			AuthToken: token, MaxConcurrentInfer: h.MaxConcurrentRequests, Routes: w.cfg.Routes, Logger: w.log.With("component", "http")}),
		// A client that declares a body and trickles it holds a
		// connection and an infer slot until ReadTimeout, no longer.
		ReadHeaderTimeout: h.ReadHeaderTimeout.D(),
		ReadTimeout:       h.ReadTimeout.D(),
		WriteTimeout:      h.WriteTimeout.D(),
		IdleTimeout:       h.IdleTimeout.D(),
		TLSConfig:         tlsConf,
		ErrorLog:          slog.NewLogLogger(w.log.With("component", "http").Handler(), slog.LevelDebug),
	}
	scheme := "http"
	if tlsConf != nil {
		scheme = "https"
	}
	w.log.Info("http listening", "addr", lis.Addr().String(), "scheme", scheme, "auth", token != "")
	if token == "" && !loopback(lis.Addr()) {
		w.log.Warn("http listens beyond loopback without a bearer token: whoever reaches it can read task results and run inference; set http.auth_token, http.auth_token_file or INFERQ_HTTP_AUTH_TOKEN",
			"addr", lis.Addr().String())
	}
	return nil
}

// loopback reports whether a listener's address is reachable from this
// host only.
func loopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// Ready reports whether every queue's poller reached the broker and the
// result spool is not full.
func (w *Worker) Ready() bool { return w.srv.Ready() }

// Inflight is the number of tasks taken and not yet settled.
func (w *Worker) Inflight() int64 { return w.srv.Inflight() }

// Server is the worker's consumer (a model repository adds and removes
// models through it).
func (w *Worker) Server() *consumer.Server { return w.srv }

// Addr is the HTTP listener's address, nil without one.
func (w *Worker) Addr() net.Addr {
	if w.lis == nil {
		return nil
	}
	return w.lis.Addr()
}

// Run consumes until ctx ends, then lets taken tasks finish (the
// consumer's DrainTimeout), waits up to SpoolFlushTimeout for the result
// spool to reach the broker, stops the batchers and the HTTP server, writes
// what is still spooled to the data dir and closes the journal and the
// connection. Batchers and
// the store outlive ctx: what was taken must still run and be stored
// during the drain.
func (w *Worker) Run(ctx context.Context) error {
	back, stopBack := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBack()
	var bg errgroup.Group
	w.startBackground(back, &bg)
	runErr := w.srv.Run(ctx)
	w.log.Info("consumer stopped; flushing", "inflight", w.srv.Inflight())
	w.flushSpool() // the store's Run replays meanwhile
	stopBack()
	return errors.Join(runErr, w.shutdown(&bg))
}

func (w *Worker) startBackground(ctx context.Context, bg *errgroup.Group) {
	for _, b := range w.cfg.Batchers {
		bg.Go(func() error { return b.Run(ctx) })
	}
	for _, f := range w.cfg.Background {
		bg.Go(func() error { return f(ctx) })
	}
	bg.Go(func() error { return w.store.Run(ctx) })
	if w.hs != nil {
		bg.Go(w.serveHTTP)
	}
	if w.gs != nil {
		bg.Go(w.serveGRPC)
	}
}

func (w *Worker) serveHTTP() error {
	var err error
	if w.hs.TLSConfig != nil {
		err = w.hs.ServeTLS(w.lis, "", "") // the certificate is in TLSConfig
	} else {
		err = w.hs.Serve(w.lis)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http: %w", err)
	}
	return nil
}

// flushSpool waits, within SpoolFlushTimeout, for the result spool's
// records to reach the broker, and says what is left and where.
func (w *Worker) flushSpool() {
	d := w.cfg.SpoolFlushTimeout
	if d == 0 {
		d = DefaultSpoolFlushTimeout
	}
	if d < 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	err := w.store.Flush(ctx)
	if err == nil {
		return
	}
	st := w.store.Stats()
	if w.cfg.DataDir == "" || w.cfg.Results.Spool == models.SpoolMemory {
		w.log.Error("result spool not flushed to the broker in time; the memory spool loses these records at exit",
			"timeout", d, "pending", st.Pending, "undeliverable", st.Undeliverable, "err", err)
		return
	}
	w.log.Warn("result spool not flushed to the broker in time; the records stay in the data dir for the next start",
		"timeout", d, "pending", st.Pending, "undeliverable", st.Undeliverable, "data_dir", w.cfg.DataDir, "err", err)
}

// shutdown stops the HTTP server, waits for the background parts, flushes
// the store and releases the rest.
func (w *Worker) shutdown(bg *errgroup.Group) error {
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	if w.hs != nil {
		_ = w.hs.Shutdown(ctx)
		w.lis = nil // closed by Shutdown
	}
	w.stopGRPC(ctx)
	err := bg.Wait()
	if ferr := w.store.Close(ctx); ferr != nil {
		w.log.Error("result spool flush incomplete", "err", ferr)
		err = errors.Join(err, ferr)
	}
	w.store = nil
	w.release()
	w.log.Info("stopped")
	return err
}

// release closes what is still open.
func (w *Worker) release() {
	if w.lis != nil {
		_ = w.lis.Close()
	}
	if w.glis != nil {
		_ = w.glis.Close()
	}
	if w.store != nil {
		_ = w.store.Close(context.Background())
	}
	if w.journal != nil {
		_ = w.journal.Close()
	}
	if w.conn != nil {
		_ = w.conn.Close()
	}
	if w.dirLock != nil { // last: the store and journal above are closed
		_ = w.dirLock.Release()
		w.dirLock = nil
	}
}
