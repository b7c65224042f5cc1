package bench

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inferq/inferq/batch"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/models/examples"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/runtime"
	"github.com/inferq/inferq/shard"
)

// The modes of a run, in the order the report lists them.
const (
	// ModeDirect runs the sessions behind the dynamic batcher, no broker:
	// the inference ceiling.
	ModeDirect = "direct"
	// ModeBroker is the zero-work worker: polls, canned results, acks.
	ModeBroker = "broker"
	// ModeQueue is the full path through an in-process inferq server.
	ModeQueue = "queue"
	// ModeQuery sends sync queries on the model's queue.
	ModeQuery = "query"
	// ModeAdapter emulates the Python adapter: one task at a time.
	ModeAdapter = "adapter"
	// ModeHTTP and ModeGRPC send Open Inference Protocol infer requests
	// to an in-process server's HTTP and gRPC listeners (oip.go).
	ModeHTTP = "http"
	ModeGRPC = "grpc"
)

var allModes = []string{ModeDirect, ModeBroker, ModeQueue, ModeQuery, ModeAdapter, ModeHTTP, ModeGRPC}

// Config is one bench run. Its fields mirror the flags of `inferq bench`,
// and Validate's errors name those flags.
type Config struct {
	Models     []string // busy models (default mlp)
	Idle       []string // served on their own queues, sent nothing
	Modes      string   // comma separated
	Tasks      int      // tasks per sample; 0: Duration
	Duration   time.Duration
	Warmup     time.Duration
	Producers  int
	Inflight   int
	SendBatch  int
	BatchSizes string // max_batch_size values to sweep, "1,8,32"; "": each model's
	// MaxQueueDelay, when not 0, is every model's batching.max_queue_delay.
	MaxQueueDelay time.Duration
	Payload       string // json or binary
	// Shapes are the --shape values, INPUT=D1,D2,...: the dims of one
	// task's input INPUT of a busy model with dynamic dims (shape.go).
	Shapes  []string
	Devices []string
	Broker  string // "": an embedded broker in this process
	// BrokerConn is how every client of the run reaches Broker: auth
	// token, TLS (client certificate included), call timeout, keepalive;
	// its Address and ClientID are the bench's. Unused with the embedded
	// broker, which speaks plaintext without a token.
	BrokerConn mq.Config
	Repeat     int
	Servers    int
	// QueueShards spreads the queue mode's queue over that many shards
	// (consumer.Config.QueueShards), the producers hashing task ids.
	QueueShards int
	// ServerShards is the servers' --queue-shards in queue mode; 0: as
	// the docs tell an operator (ServerShardCount).
	ServerShards int
	// Pipeline is the servers' --pipeline (consumer.Config.Pipeline).
	Pipeline bool
	// SimLatency, when set, runs every model on a simulated accelerator
	// per server (batch.Simulate): each run takes at least Base + PerRow x
	// rows, one run at a time per instance, the real model still running.
	SimLatency batch.Latency
	JSONPath   string
	PlotPath   string
	// ModelsDir holds the example models (written when missing) when
	// Table is nil.
	ModelsDir    string
	AdapterMax   int // 0: 2000 embedded, 300 on Broker
	Drain        time.Duration
	QueryTimeout time.Duration
	CPUProfile   string
	// Identity prefixes the producers' client ids and reply channels.
	Identity string

	// Table holds the models by name (from a config file, named by
	// TableSource in errors); nil: the example models on the CPU.
	Table       map[string]models.Model
	TableSource string
	// Env is the onnxruntime environment the sessions are opened in.
	Env *runtime.Env
	// Place decides a model's devices when Devices is empty.
	Place func([]models.Model) ([]runtime.Placement, error)
	// Stdout receives the report, Stderr the progress bar (when it is a
	// terminal).
	Stdout, Stderr io.Writer
	Logger         *slog.Logger
}

// plan is what the config asks for, checked.
type plan struct {
	modes      []string
	batchSizes []int // nil: each model's own
	binary     bool
	devices    []runtime.Device
	shapes     []shapeArg
}

// validate checks c, fills its defaults (Models: mlp) and returns the plan.
func (c *Config) validate() (*plan, error) {
	p := &plan{}
	var err error
	if p.modes, err = parseModes(c.Modes); err != nil {
		return nil, err
	}
	if p.batchSizes, err = parseBatchSizes(c.BatchSizes); err != nil {
		return nil, err
	}
	if p.shapes, err = parseShapes(c.Shapes); err != nil {
		return nil, err
	}
	switch strings.ToLower(c.Payload) {
	case "binary":
		p.binary = true
	case "json":
	default:
		return nil, fmt.Errorf("--payload %q: want json or binary", c.Payload)
	}
	for _, d := range c.Devices {
		dev, err := runtime.ParseDevice(d)
		if err != nil {
			return nil, fmt.Errorf("--device %q: %v", d, err)
		}
		p.devices = append(p.devices, dev)
	}
	if err := c.checkLoad(); err != nil {
		return nil, err
	}
	if len(c.Models) == 0 {
		c.Models = []string{examples.MLPName}
	}
	return p, c.checkModels()
}

// Validate checks c and fills its defaults. Its errors are the caller's to
// fix (usage errors).
func (c *Config) Validate() error {
	_, err := c.validate()
	return err
}

func parseModes(s string) ([]string, error) {
	var modes []string
	for m := range strings.SplitSeq(s, ",") {
		m = strings.TrimSpace(strings.ToLower(m))
		if m == "" {
			continue
		}
		if !slices.Contains(allModes, m) {
			return nil, fmt.Errorf("--modes: unknown mode %q (want %s)", m, strings.Join(allModes, ", "))
		}
		if !slices.Contains(modes, m) {
			modes = append(modes, m)
		}
	}
	if len(modes) == 0 {
		return nil, errors.New("--modes: no mode")
	}
	slices.SortFunc(modes, func(a, b string) int { return slices.Index(allModes, a) - slices.Index(allModes, b) })
	return modes, nil
}

func parseBatchSizes(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--batch-sizes: %q is not a positive integer", f)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

func (c *Config) checkLoad() error {
	switch {
	case c.Tasks < 0:
		return fmt.Errorf("--tasks %d: want at least 1", c.Tasks)
	case c.Tasks == 0 && c.Duration <= 0:
		return fmt.Errorf("--duration %v: want a positive duration", c.Duration)
	case c.Warmup < 0:
		return fmt.Errorf("--warmup %v: negative", c.Warmup)
	case c.MaxQueueDelay < 0 || c.MaxQueueDelay > time.Minute:
		return fmt.Errorf("--max-queue-delay %v: want 0 (the model's) up to 1m", c.MaxQueueDelay)
	case c.Producers < 1 || c.Inflight < 1 || c.SendBatch < 1:
		return errors.New("--producers, --inflight and --send-batch must be at least 1")
	case c.Repeat < 1:
		return fmt.Errorf("--repeat %d: want at least 1", c.Repeat)
	case c.Servers < 1:
		return fmt.Errorf("--servers %d: want at least 1", c.Servers)
	case c.QueueShards < 0 || c.QueueShards > shard.Max:
		return fmt.Errorf("--queue-shards %d: want 1 to %d", c.QueueShards, shard.Max)
	case c.ServerShards < 0 || c.ServerShards > shard.Max:
		return fmt.Errorf("--server-shards %d: want 1 to %d, or 0 for the recommended count", c.ServerShards, shard.Max)
	case c.ServerShards > 0 && c.QueueShards > 1 && c.ServerShards != c.QueueShards:
		return fmt.Errorf("--server-shards %d with --queue-shards %d: producers that hash over shards need the servers to use the same count", c.ServerShards, c.QueueShards)
	case c.Drain <= 0:
		return fmt.Errorf("--drain-timeout %v: want a positive duration", c.Drain)
	case c.PlotPath != "" && !strings.HasSuffix(strings.ToLower(c.PlotPath), ".png"):
		return fmt.Errorf("--plot %q: want a .png file", c.PlotPath)
	}
	return nil
}

// checkModels checks that every model is known: in Table, else an example.
func (c *Config) checkModels() error {
	for _, m := range c.Idle {
		if slices.Contains(c.Models, m) {
			return fmt.Errorf("--idle-model %s is also a --model", m)
		}
	}
	for _, name := range append(slices.Clone(c.Models), c.Idle...) {
		if c.Table != nil {
			if _, ok := c.Table[name]; !ok {
				return fmt.Errorf("model %q is not in %s", name, c.TableSource)
			}
			continue
		}
		if _, ok := examples.Inputs(name); !ok {
			return fmt.Errorf("model %q: without --config only the example models mlp, multitype and resnet18 are known", name)
		}
	}
	return nil
}

// brokerConn is the connection of the run's clients to the broker at addr:
// BrokerConn there, or a plain connection to the embedded broker.
func (c *Config) brokerConn(addr string, embedded bool) mq.Config {
	if embedded {
		return mq.Config{Address: addr}
	}
	conn := c.BrokerConn
	conn.Address = addr
	return conn
}

// withClientID is conn for the client named id.
func withClientID(conn mq.Config, id string) mq.Config {
	conn.ClientID = id
	return conn
}

// ServerShardCount is the servers' --queue-shards in queue mode: the
// producers' count when they hash over shards, else ServerShards, else
// what the docs tell an operator to set (shard.ForFleet) for a fleet, which
// needs it to spread plain producers' tasks, and for a lone replica with
// Pipeline, which needs it to poll its next batch while one runs
// (consumer's Pipelining); else 1.
func (c Config) ServerShardCount() int {
	switch {
	case c.QueueShards > 1:
		return c.QueueShards
	case c.ServerShards > 0:
		return c.ServerShards
	}
	if c.Servers > 1 || c.Pipeline {
		return shard.ForFleet(c.Servers)
	}
	return 1
}
