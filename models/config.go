package models

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/inferq/inferq/task"
	"go.yaml.in/yaml/v3"
)

// Defaults that the config file can override.
const (
	DefaultBrokerAddress     = "127.0.0.1:50000"
	DefaultClientID          = "inferq"
	DefaultHTTPListen        = "127.0.0.1:8080"
	DefaultQueuePrefix       = "inferq."
	DefaultMaxBatchSize      = 32
	DefaultMaxQueueDelay     = Duration(time.Millisecond)
	DefaultMaxRetries        = 3
	DefaultBackoffInitial    = Duration(time.Second)
	DefaultBackoffMax        = Duration(30 * time.Second)
	DefaultResultPrefix      = "rayserve-result-"
	DefaultResultExpiry      = Duration(time.Hour)
	DefaultMaxBodyBytes      = 64 << 20
	DefaultMaxTensorElements = 1 << 24
	DefaultMaxResultBytes    = 4 << 20

	// The HTTP server's defaults: a client gets 5 s for its headers and
	// 60 s for the whole request (a 64 MiB body at 1.1 MB/s) or the whole
	// response; an idle keep-alive connection is closed after 2 minutes.
	DefaultHTTPReadHeaderTimeout = Duration(5 * time.Second)
	DefaultHTTPReadTimeout       = Duration(60 * time.Second)
	DefaultHTTPWriteTimeout      = Duration(60 * time.Second)
	DefaultHTTPIdleTimeout       = Duration(120 * time.Second)
	// DefaultHTTPMaxConcurrentRequests bounds the infer requests in
	// progress, and so the request bodies held in memory.
	DefaultHTTPMaxConcurrentRequests = 64

	// SpoolDisk and SpoolMemory are results.spool's values; disk is the
	// default.
	SpoolDisk   = SpoolMode("disk")
	SpoolMemory = SpoolMode("memory")
	// DefaultDataDir is data_dir when results.spool is disk and none is
	// given: relative to the working directory, like Prometheus' data/
	// (`make run` keeps its state under data/ too). A process elsewhere
	// sets data_dir (the image and the Kubernetes manifests do).
	DefaultDataDir = "data"

	// maxNameLen bounds model and channel names.
	maxNameLen = 200
	// maxMessageBytes is the broker's gRPC message limit (KUBEMQ.md trap 10,
	// mq.GRPCMessageBytes).
	maxMessageBytes = 100 << 20
	// messageSlack is what a message may carry besides a body (metadata,
	// tags) and what a gRPC message holds besides its messages (framing).
	messageSlack = 1 << 20
	// maxPayloadBytes is the most limits.max_body_bytes and
	// result.max_result_bytes may be: a body that size, its metadata and
	// tags still fit in one gRPC message (mq.MaxSendBytes is
	// maxMessageBytes less one messageSlack, and a message needs one more).
	maxPayloadBytes = maxMessageBytes - 2*messageSlack
	// minSendBytes is the least the broker connection's send limit is:
	// the mq package's own default.
	minSendBytes = 16 << 20
)

// Config is the whole configuration file.
type Config struct {
	Broker Broker `yaml:"broker"`
	HTTP   HTTP   `yaml:"http"`
	// GRPC is the Open Inference Protocol's gRPC endpoint (grpc.go).
	GRPC GRPC `yaml:"grpc"`
	// DataDir holds the result spool (results/) and the attempt journal
	// (journal/); one process holds it at a time. Default DefaultDataDir
	// with the disk spool; with the memory spool and none given, the
	// journal is in memory too.
	DataDir string  `yaml:"data_dir"`
	Results Results `yaml:"results"`
	Models  []Model `yaml:"models"`

	// Model repository (see Repository in repository.go).
	Repository `yaml:",inline"`
}

// Results configures the result store every model shares.
type Results struct {
	// Spool is where finished records wait while the broker does not take
	// them: SpoolDisk (the default: under data_dir, kept across restarts)
	// or SpoolMemory, an explicit choice: they are lost when the process
	// ends, and inferq warns at startup.
	Spool SpoolMode `yaml:"spool"`
	// SpoolMaxEntries and SpoolMaxMemoryBytes bound the records whose
	// bytes the spool keeps in memory (with the disk spool only those it
	// could not write to disk); SpoolMaxDiskBytes bounds the disk spool.
	// At a bound the spool is full: inferq stops taking tasks (readiness
	// false) until the broker takes records again; it never drops one.
	SpoolMaxEntries     int   `yaml:"spool_max_entries"`
	SpoolMaxMemoryBytes int64 `yaml:"spool_max_memory_bytes"`
	SpoolMaxDiskBytes   int64 `yaml:"spool_max_disk_bytes"`
}

// Defaults of the spool's bounds.
const (
	DefaultSpoolMaxEntries     = 10000
	DefaultSpoolMaxMemoryBytes = 1 << 30
	DefaultSpoolMaxDiskBytes   = 4 << 30
)

// SetDefaults fills the spool mode (disk) and bounds left zero.
func (r *Results) SetDefaults() {
	if r.Spool == "" {
		r.Spool = SpoolDisk
	}
	if r.SpoolMaxEntries == 0 {
		r.SpoolMaxEntries = DefaultSpoolMaxEntries
	}
	if r.SpoolMaxMemoryBytes == 0 {
		r.SpoolMaxMemoryBytes = DefaultSpoolMaxMemoryBytes
	}
	if r.SpoolMaxDiskBytes == 0 {
		r.SpoolMaxDiskBytes = DefaultSpoolMaxDiskBytes
	}
}

// SpoolMode is results.spool: SpoolDisk or SpoolMemory.
type SpoolMode string

// UnmarshalYAML refuses any other value.
func (m *SpoolMode) UnmarshalYAML(n *yaml.Node) error {
	var v string
	if err := n.Decode(&v); err != nil {
		return err
	}
	switch SpoolMode(v) {
	case SpoolDisk, SpoolMemory:
		*m = SpoolMode(v)
		return nil
	}
	return fmt.Errorf("line %d: results.spool: want %s or %s", n.Line, SpoolDisk, SpoolMemory)
}

// Broker is how inferq reaches KubeMQ.
type Broker struct {
	Address   string `yaml:"address"`
	ClientID  string `yaml:"client_id"`
	AuthToken string `yaml:"auth_token"`
	TLS       TLS    `yaml:"tls"`
	// DataDir, EventsStoreMaxEvents and EventsStoreMaxBytes configure the
	// embedded broker of `inferq serve --embedded-broker` only (`inferq
	// broker` takes them as flags). DataDir keeps its queues and events
	// store on disk there, so that a restart loses nothing acked (env
	// INFERQ_BROKER_DATA_DIR; empty: in memory). The bounds cap each events
	// store channel beside its 24 h retention, dropping the oldest events:
	// 0 takes the default (100000 events, 128 MiB), negative is no bound.
	DataDir              string `yaml:"data_dir"`
	EventsStoreMaxEvents int    `yaml:"events_store_max_events"`
	EventsStoreMaxBytes  int64  `yaml:"events_store_max_bytes"`
}

// TLS holds the client certificate, key and CA files for the broker.
type TLS struct {
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	CA   string `yaml:"ca"`
}

// Enabled reports whether any TLS file is set.
func (t TLS) Enabled() bool { return t.Cert != "" || t.Key != "" || t.CA != "" }

// HTTP is the operations endpoint (health, metrics, task lookup, the Open
// Inference Protocol). A zero timeout or limit takes its default.
type HTTP struct {
	Listen string `yaml:"listen"`
	// AuthToken, when set (or read from AuthTokenFile), is the bearer
	// token every request but the health checks (/healthz, /readyz,
	// /v2/health/live, /v2/health/ready) must carry.
	AuthToken string `yaml:"auth_token"`
	// AuthTokenFile names a file holding the token (surrounding
	// whitespace is trimmed), such as a mounted Secret.
	AuthTokenFile string `yaml:"auth_token_file"`
	// TLSCert and TLSKey, set together, make the listener serve HTTPS.
	TLSCert string `yaml:"tls_cert"`
	TLSKey  string `yaml:"tls_key"`
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"`
	// ReadTimeout bounds reading a whole request, body included.
	ReadTimeout Duration `yaml:"read_timeout"`
	// WriteTimeout bounds a request from the end of its headers to the
	// end of its response.
	WriteTimeout Duration `yaml:"write_timeout"`
	// IdleTimeout bounds the wait for the next request on a keep-alive
	// connection.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// MaxConcurrentRequests bounds the infer requests in progress; one
	// more is answered 503 with Retry-After at once.
	MaxConcurrentRequests int `yaml:"max_concurrent_requests"`
	// AdvertiseURL is where other hosts reach this replica's HTTP
	// listener, an absolute http(s) URL without query or fragment (a
	// path prefix is kept, a trailing '/' dropped). When set, an
	// oversized result's result_ref is <AdvertiseURL>/v1/tasks/<id>,
	// which reaches the replica whose spool holds the whole record; when
	// empty it is the relative /v1/tasks/<id>, right only with a single
	// replica behind the Service. In Kubernetes: each pod's stable DNS
	// name through a headless Service (configs/kubernetes/).
	AdvertiseURL string `yaml:"advertise_url"`
}

// SetDefaults fills h's zero timeouts and limits.
func (h *HTTP) SetDefaults() {
	if h.Listen == "" {
		h.Listen = DefaultHTTPListen
	}
	for _, d := range []struct {
		v   *Duration
		def Duration
	}{
		{&h.ReadHeaderTimeout, DefaultHTTPReadHeaderTimeout}, {&h.ReadTimeout, DefaultHTTPReadTimeout},
		{&h.WriteTimeout, DefaultHTTPWriteTimeout}, {&h.IdleTimeout, DefaultHTTPIdleTimeout},
	} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if h.MaxConcurrentRequests == 0 {
		h.MaxConcurrentRequests = DefaultHTTPMaxConcurrentRequests
	}
}

// validate reports h's problems through top (field, message).
func (h *HTTP) validate(top func(field, format string, args ...any)) {
	for _, d := range []struct {
		field string
		v     Duration
	}{
		{"http.read_header_timeout", h.ReadHeaderTimeout}, {"http.read_timeout", h.ReadTimeout},
		{"http.write_timeout", h.WriteTimeout}, {"http.idle_timeout", h.IdleTimeout},
	} {
		if d.v < 0 {
			top(d.field, "is %s; want a positive duration (0 takes the default)", d.v)
		}
		durAtMost(top, d.field, d.v, maxHTTPTimeoutBound, "")
	}
	if h.MaxConcurrentRequests < 0 {
		top("http.max_concurrent_requests", "is %d; want at least 1 (0 takes the default %d)", h.MaxConcurrentRequests, DefaultHTTPMaxConcurrentRequests)
	}
	atMost(top, "http.max_concurrent_requests", int64(h.MaxConcurrentRequests), maxConcurrentRequestsBound, "each may hold a request body")
	if h.AuthToken != "" && h.AuthTokenFile != "" {
		top("http.auth_token", "and http.auth_token_file are both set; set one")
	}
	if strings.TrimSpace(h.AuthToken) != h.AuthToken {
		top("http.auth_token", "has leading or trailing whitespace")
	}
	checkFile := func(field, path string) { checkConfigFile(top, field, path) }
	checkFile("http.auth_token_file", h.AuthTokenFile)
	if (h.TLSCert == "") != (h.TLSKey == "") {
		top("http.tls_cert", "and http.tls_key must be set together")
	}
	checkFile("http.tls_cert", h.TLSCert)
	checkFile("http.tls_key", h.TLSKey)
	if len(h.AdvertiseURL) > maxAdvertiseURLBytes {
		top("http.advertise_url", "is %d bytes long; the limit is %d", len(h.AdvertiseURL), maxAdvertiseURLBytes)
	} else if h.AdvertiseURL != "" {
		if err := checkAdvertiseURL(h.AdvertiseURL); err != nil {
			top("http.advertise_url", "%q %v", h.AdvertiseURL, err)
		}
	}
}

// checkAdvertiseURL reports why u cannot prefix a result_ref that another
// host follows: it must be an absolute http or https URL with a host, and
// no query, fragment or user info (a token in a record would leak it).
func checkAdvertiseURL(u string) error {
	p, err := url.Parse(u)
	switch {
	case err != nil:
		return fmt.Errorf("is not a URL: %w", errors.Unwrap(err))
	case p.Scheme != "http" && p.Scheme != "https":
		return errors.New("is not an absolute http:// or https:// URL")
	case p.Host == "" || p.Hostname() == "":
		return errors.New("has no host")
	case p.RawQuery != "" || p.ForceQuery:
		return errors.New("has a query; want none")
	case p.Fragment != "" || strings.Contains(u, "#"):
		return errors.New("has a fragment; want none")
	case p.User != nil:
		return errors.New("has user info; want none (records are read by every consumer of the result)")
	}
	return nil
}

// Token returns the bearer token: AuthToken, else the trimmed content of
// AuthTokenFile, else "" (no authentication).
func (h HTTP) Token() (string, error) {
	if h.AuthToken != "" || h.AuthTokenFile == "" {
		return h.AuthToken, nil
	}
	b, err := os.ReadFile(h.AuthTokenFile)
	if err != nil {
		return "", fmt.Errorf("http.auth_token_file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("http.auth_token_file: %s is empty", h.AuthTokenFile)
	}
	return tok, nil
}

// Model is one served model.
type Model struct {
	// Name is the task_name producers send; used verbatim.
	Name string `yaml:"name"`
	// Path is the ONNX file.
	Path string `yaml:"path"`
	// Queue is the KubeMQ queue the model consumes (default inferq.<name>).
	// Several models may share one queue; tasks are routed by task_name.
	Queue string `yaml:"queue"`
	// Device is auto, cpu, cuda or a list of GPU indexes.
	Device Device `yaml:"device"`
	// Instances is the number of sessions per device.
	Instances int `yaml:"instances"`
	// Concurrency is the number of runs in flight per session.
	Concurrency int `yaml:"concurrency"`
	// Batching is the dynamic batcher's policy.
	Batching Batching `yaml:"batching"`
	// Retries is the failure policy.
	Retries Retries `yaml:"retries"`
	// DLQQueue receives tasks that failed their last attempt
	// (default <queue>.dlq).
	DLQQueue string `yaml:"dlq_queue"`
	// UnprocessableQueue receives bodies that cannot be decoded
	// (default <queue>.unprocessable).
	UnprocessableQueue string `yaml:"unprocessable_queue"`
	// Result is where results go when a task has no reply_to.
	Result Result `yaml:"result"`
	// Timeout bounds a task from its created_at; 0 means none unless the
	// task sets timeout_ms.
	Timeout Duration `yaml:"timeout"`
	// IntraOpThreads is onnxruntime's intra-op thread count per session;
	// 0 means cores divided by the sessions that run at once.
	IntraOpThreads int `yaml:"intra_op_threads"`
	// Limits bound what one task may ask for.
	Limits Limits `yaml:"limits"`
	// CUDA holds the CUDA execution provider's options for the model's GPU
	// sessions.
	CUDA CUDA `yaml:"cuda"`
	// Progress turns the progress events of the model's tasks (received,
	// running, stored, retrying, failed on <queue>.progress) on or off;
	// unset is on (ProgressOn). Off saves the broker and this process their
	// cost where nobody watches them; a task can turn its own off
	// (kwargs.parameters.progress: false) but not on.
	Progress Switch `yaml:"progress,omitempty"`
}

// ProgressOn reports whether the model's tasks get progress events.
func (m *Model) ProgressOn() bool { return m.Progress.On(true) }

// Batching is a model's dynamic batching policy.
type Batching struct {
	// MaxBatchSize is the most items in one run.
	MaxBatchSize int `yaml:"max_batch_size"`
	// MaxQueueDelay is how long the batcher waits after the first item
	// for more. Tasks of a queue poll do not wait for it once intake has
	// enqueued all that the poll delivered (batch.Batcher.Flush).
	MaxQueueDelay Duration `yaml:"max_queue_delay"`
	// PreferredBatchSizes, optional, are sizes the batcher runs as soon
	// as it reaches them.
	PreferredBatchSizes []int `yaml:"preferred_batch_sizes"`

	// Queue policy, Triton's dynamic_batching fields.

	// MaxQueueSize bounds the requests admitted and waiting for their run
	// (queued tasks, queries and HTTP requests together). When it is
	// reached the model's queue is not polled further (tasks stay on the
	// broker), HTTP infer answers 503 with Retry-After and a query gets
	// an error. 0: the batcher's built-in bound (4 x max_batch_size x
	// instances x concurrency), where every path waits for room.
	MaxQueueSize int `yaml:"max_queue_size"`
	// DefaultQueueTimeout bounds a request's wait for its run, from its
	// admission to the batcher: one that waits longer is not run (a task
	// gets a FAILURE record "queue timeout", HTTP 503). 0: no bound.
	DefaultQueueTimeout Duration `yaml:"default_queue_timeout"`
	// PriorityLevels is the number of priority levels, 1 the highest
	// (Triton's order); requests name one in kwargs.priority (tasks and
	// queries) or the "priority" parameter (HTTP infer). 0: one level.
	PriorityLevels int `yaml:"priority_levels"`
	// DefaultPriorityLevel is the level of a request without one (or with
	// priority 0); 0 takes the lowest, priority_levels.
	DefaultPriorityLevel int `yaml:"default_priority_level"`
	// PriorityAging bounds starvation: a waiting request rises one lane
	// (sync requests ahead of queued tasks within a level, then a level)
	// every priority_aging, so none waits longer than
	// (2 x levels - 1) x priority_aging before it is first in line
	// (0: DefaultPriorityAging).
	PriorityAging Duration `yaml:"priority_aging"`
}

// DefaultPriorityAging is batching.priority_aging when unset.
const DefaultPriorityAging = Duration(time.Second)

// Level is the batcher lane of a request's priority: p in
// 1..priority_levels, or 0 for default_priority_level (the lowest when
// that is 0). The caller checks p with CheckPriority first.
func (b Batching) Level(p int) int {
	if p == 0 {
		p = b.DefaultPriorityLevel
	}
	if p == 0 {
		p = max(b.PriorityLevels, 1)
	}
	return p
}

// CheckPriority refuses a request priority the model has no level for;
// field names where it came from (kwargs.priority, the "priority"
// parameter).
func (b Batching) CheckPriority(field string, p int) error {
	switch {
	case p == 0:
		return nil
	case b.PriorityLevels == 0:
		return fmt.Errorf("%s %d: the model has no priority levels (batching.priority_levels 0); send 0 or none", field, p)
	case p < 0 || p > b.PriorityLevels:
		return fmt.Errorf("%s %d: want 1 (highest) to %d (batching.priority_levels), or 0 for the default level", field, p, b.PriorityLevels)
	}
	return nil
}

// Aging is priority_aging, the default when unset.
func (b Batching) Aging() time.Duration {
	if b.PriorityAging <= 0 {
		return DefaultPriorityAging.D()
	}
	return b.PriorityAging.D()
}

// Retries is a model's retry policy.
type Retries struct {
	// MaxRetries is the number of retries after the first attempt
	// (Celery's count); 0 makes every failure final.
	MaxRetries int `yaml:"max_retries"`
	// BackoffInitial is the first retry's delay; 0 means an immediate NAck.
	BackoffInitial Duration `yaml:"backoff_initial"`
	// BackoffMax caps the exponential backoff.
	BackoffMax Duration `yaml:"backoff_max"`
}

// Result is the compatible per-task result channel.
type Result struct {
	ChannelPrefix string   `yaml:"channel_prefix"`
	Expiry        Duration `yaml:"expiry"`
	// MaxResultBytes is the largest record sent to the broker; a bigger one
	// stays in the spool and the broker gets a reference.
	MaxResultBytes int `yaml:"max_result_bytes"`
}

// Limits bound the size of one task.
type Limits struct {
	// MaxBodyBytes bounds a task's body (default 64 MiB, at most 98 MiB).
	// The broker connection's send limit follows the largest of them (see
	// Config.MaxMessageBytes), so a task taken can always be resent.
	MaxBodyBytes      int   `yaml:"max_body_bytes"`
	MaxTensorElements int64 `yaml:"max_tensor_elements"`
}

// UnmarshalYAML fills a model's defaults before decoding, so a field set
// explicitly to zero (max_retries: 0, backoff_initial: 0) stays zero.
func (m *Model) UnmarshalYAML(n *yaml.Node) error {
	type plain Model
	// Node.Decode does not inherit the decoder's KnownFields, so unknown
	// keys below a model are checked here.
	if err := checkKnownFields(n, reflect.TypeFor[plain]()); err != nil {
		return err
	}
	p := plain(NewModel(""))
	if err := n.Decode(&p); err != nil {
		return err
	}
	*m = Model(p)
	return nil
}

// NewModel returns a model called name with every default set except
// those derived from the name and queue (see Config.SetDefaults).
func NewModel(name string) Model {
	return Model{
		Name:        name,
		Device:      Device{Kind: DeviceAuto},
		Instances:   1,
		Concurrency: 1,
		Batching: Batching{
			MaxBatchSize:  DefaultMaxBatchSize,
			MaxQueueDelay: DefaultMaxQueueDelay,
			PriorityAging: DefaultPriorityAging,
		},
		Retries: Retries{
			MaxRetries:     DefaultMaxRetries,
			BackoffInitial: DefaultBackoffInitial,
			BackoffMax:     DefaultBackoffMax,
		},
		Result: Result{
			ChannelPrefix:  DefaultResultPrefix,
			Expiry:         DefaultResultExpiry,
			MaxResultBytes: DefaultMaxResultBytes,
		},
		Limits: Limits{
			MaxBodyBytes:      DefaultMaxBodyBytes,
			MaxTensorElements: DefaultMaxTensorElements,
		},
		CUDA: NewCUDA(),
	}
}

// SetDefaults fills the fields left empty, including those derived from a
// model's name (queue) and queue (dlq_queue, unprocessable_queue).
func (c *Config) SetDefaults() {
	if c.Broker.Address == "" {
		c.Broker.Address = DefaultBrokerAddress
	}
	if c.Broker.ClientID == "" {
		c.Broker.ClientID = DefaultClientID
	}
	c.HTTP.SetDefaults()
	c.GRPC.SetDefaults()
	c.Results.SetDefaults()
	c.Repository.SetDefaults()
	if c.DataDir == "" && c.Results.Spool == SpoolDisk {
		c.DataDir = DefaultDataDir
	}
	for i := range c.Models {
		m := &c.Models[i]
		if m.Device.Kind == "" {
			m.Device.Kind = DeviceAuto
		}
		m.CUDA.normalize()
		if m.Queue == "" && m.Name != "" {
			m.Queue = DefaultQueuePrefix + m.Name
		}
		if m.DLQQueue == "" && m.Queue != "" {
			m.DLQQueue = m.Queue + ".dlq"
		}
		if m.UnprocessableQueue == "" && m.Queue != "" {
			m.UnprocessableQueue = m.Queue + ".unprocessable"
		}
	}
}

// Parse decodes a YAML config, fills defaults and validates it. Unknown
// fields are errors, so a typo does not silently fall back to a default.
// data is at most MaxConfigBytes; errors name lines and fields, never the
// values of the file.
func Parse(data []byte) (*Config, error) {
	if len(data) > MaxConfigBytes {
		return nil, fmt.Errorf("models: parse config: %w", errTooLarge(int64(len(data))))
	}
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("models: parse config: %w", decodeError(err))
	}
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Load reads (ReadConfigFile) and parses the config file at path.
// Relative model paths are taken relative to the current directory, as
// written.
func Load(path string) (*Config, error) {
	data, err := ReadConfigFile(path)
	if err != nil {
		return nil, fmt.Errorf("models: read config: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// MaxMessageBytes is the send limit of the broker connection that serves
// c's models (mq.Config.MaxMessageBytes): the largest body a model accepts
// (limits.max_body_bytes) or result record it sends (result.max_result_bytes),
// plus 1 MiB for metadata and tags, and at least 16 MiB. So whatever a model
// accepts can be resent whole (a delayed retry, a dead letter copy); what is
// over every limit is forwarded by reference. Validate keeps it within the
// broker's gRPC message limit.
func (c *Config) MaxMessageBytes() int {
	n := 0
	for _, m := range c.Models {
		n = max(n, m.Limits.MaxBodyBytes, m.Result.MaxResultBytes)
	}
	return min(max(n+messageSlack, minSendBytes), maxMessageBytes-messageSlack)
}

// Model returns the model called name, or nil.
func (c *Config) Model(name string) *Model {
	for i := range c.Models {
		if c.Models[i].Name == name {
			return &c.Models[i]
		}
	}
	return nil
}

// Masked returns a copy of c with secrets replaced, for printing.
func (c Config) Masked() Config {
	if c.Broker.AuthToken != "" {
		c.Broker.AuthToken = "*****"
	}
	if c.HTTP.AuthToken != "" {
		c.HTTP.AuthToken = "*****"
	}
	return c
}

// YAML renders c as YAML.
func (c Config) YAML() ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		return nil, fmt.Errorf("models: render config: %w", err)
	}
	return buf.Bytes(), nil
}

// checkChannel reports why name cannot be a KubeMQ channel, or "".
func checkChannel(name string) string {
	switch {
	case name == "":
		return "is empty"
	case len(name) > maxNameLen:
		return fmt.Sprintf("is %d characters long; the limit is %d", len(name), maxNameLen)
	case strings.ContainsAny(name, " \t\r\n*>"):
		return fmt.Sprintf("%q contains whitespace or a wildcard (* or >)", name)
	case task.CheckName("", name) != nil:
		// The rule producers' names follow (task.CheckName): the broker
		// reads ':' and ';' as routing, refuses a leading, trailing or
		// doubled '.', and is damaged by control characters.
		return fmt.Sprintf("%q is not a channel name the broker keeps whole: use ASCII letters, digits, '-', '_' and '.' (not first, last or doubled)", name)
	}
	return ""
}

// checkKnownFields reports the first mapping key in n that names no field
// of struct type t, recursing into struct-typed fields.
func checkKnownFields(n *yaml.Node, t reflect.Type) error {
	if n.Kind != yaml.MappingNode || t.Kind() != reflect.Struct {
		return nil
	}
	fields := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		fields[name] = f.Type
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		ft, ok := fields[k.Value]
		if !ok {
			return fmt.Errorf("line %d: field %s not found in type %s", k.Line, showKey(k.Value), t.Name())
		}
		if ft.Kind() == reflect.Struct && ft.PkgPath() != "" && !reflect.PointerTo(ft).Implements(unmarshalerType) {
			if err := checkKnownFields(v, ft); err != nil {
				return err
			}
		}
	}
	return nil
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
