package client

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/task"
)

// Defaults of Config, and the channel names inferq serves by default.
const (
	// DefaultQueuePrefix prefixes a model's queue: "inferq.<model>".
	DefaultQueuePrefix = "inferq."
	// DefaultReplyPrefix prefixes a producer's reply channel:
	// "inferq.reply.<identity>".
	DefaultReplyPrefix = "inferq.reply."
	// DefaultResultPrefix prefixes the compat per-task result channel.
	DefaultResultPrefix = "rayserve-result-"
	// DefaultCompatExpiry is the expiry of the PENDING record written for
	// a compat task, as the Python adapter writes it.
	DefaultCompatExpiry = time.Hour
)

// Config configures a Client. Zero fields get their defaults from Validate.
type Config struct {
	// Broker is the connection to KubeMQ. Address is required; ClientID
	// defaults to "inferq-client-<Identity>" and Logger to Config.Logger.
	Broker mq.Config
	// Identity names this producer, stably across restarts (a service
	// name, a host name): its reply channel is ReplyPrefix + Identity.
	// Letters, digits, '.', '-' and '_' only. Required.
	Identity string
	// ReplyChannel overrides the reply channel's name.
	ReplyChannel string
	// CursorFile, when set, is where the Client keeps the reply channel's
	// low-water sequence (a decimal number), written every CursorInterval
	// and on Close. New resumes from it. One file per identity and process.
	CursorFile string
	// StartSeq is the sequence to subscribe from when CursorFile is unset
	// or holds nothing yet; 0 means only records sent from now on.
	StartSeq uint64
	// QueuePrefix makes a model's default queue, QueuePrefix + model.
	// Default DefaultQueuePrefix.
	QueuePrefix string
	// ResultPrefix makes a compat task's result channel. Default
	// DefaultResultPrefix.
	ResultPrefix string
	// CompatExpiry is the expiry of the PENDING record WithCompat writes.
	// Default DefaultCompatExpiry.
	CompatExpiry time.Duration
	// MaxReceiveCount and DeadLetterQueue are the queue policy put on
	// every task (WithRetries overrides them per call): after
	// MaxReceiveCount deliveries the broker moves the task to
	// DeadLetterQueue. Zero: no policy (inferq applies its own retries).
	MaxReceiveCount int
	DeadLetterQueue string
	// QueueShards spreads tasks over that many shards of each queue, by
	// task id (see WithShards); 0 or 1: the queue alone.
	QueueShards int
	// BinaryInputs sends every task in the binary form (raw tensor bytes
	// after a JSON header), the fast path for large tensors.
	BinaryInputs bool
	// MaxUnclaimed bounds the records kept for tasks this Client did not
	// enqueue (a previous run's, replayed after a restart) until a Wait
	// asks for them; the oldest go first. Records of tasks this Client
	// enqueued are kept until waited for or forgotten. Default 10000.
	MaxUnclaimed int
	// UnclaimedTTL is how long such a record is kept. Default 10 min.
	UnclaimedTTL time.Duration
	// DedupWindow is how many handed-out task ids are remembered to drop
	// duplicate records. Default 100000.
	DedupWindow int
	// CursorInterval is how often the cursor file is written when it
	// changed. Default 1 s.
	CursorInterval time.Duration
	// ReadyRetry is the first interval between the probes that check the
	// new-only subscription is live (see Ready). Default 200 ms.
	ReadyRetry time.Duration
	// SendRetryFor bounds how long Enqueue and EnqueueMany keep resending
	// tasks that failed because the broker is away (mq.ErrUnavailable),
	// counted from the first failure of a call, within the call's ctx;
	// the waits between sends double from Broker.RetryMin to
	// Broker.RetryMax. Default 2 min.
	SendRetryFor time.Duration
	// HTTPURL is the base URL of a replica's HTTP listener (http://host:8080,
	// a path prefix kept) that a relative result_ref, "/v1/tasks/<id>" from
	// servers without http.advertise_url, is read from (see FollowRef);
	// absolute references need none.
	HTTPURL string
	// HTTPToken is the replicas' HTTP bearer token (http.auth_token), sent
	// with the read of a result stored by reference.
	HTTPToken string
	// HTTPClient reads results stored by reference. Default: one without
	// a timeout of its own (the call's ctx bounds a read).
	HTTPClient *http.Client
	// Logger receives the Client's logs. Default: discard.
	Logger *slog.Logger
}

// HostIdentity is prefix followed by this machine's host name
// ("localhost" when it has none), each character an identity may not carry
// replaced by '-': an identity stable per machine, never per run (a reply
// channel costs the broker files for 24 h).
func HostIdentity(prefix string) string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "localhost"
	}
	return prefix + strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			return r
		}
		return '-'
	}, h)
}

// Validate checks c and fills in the defaults.
func (c *Config) Validate() error {
	if c.Identity == "" {
		return errors.New("client: config: Identity is required (a stable producer name)")
	}
	// Workers refuse a task whose reply_to breaks task.CheckName (it goes
	// to the unprocessable queue): refuse such a Config here instead.
	if err := task.CheckName("Identity", c.Identity); err != nil {
		return fmt.Errorf("client: config: %w", err)
	}
	if c.ReplyChannel == "" {
		c.ReplyChannel = DefaultReplyPrefix + c.Identity
	}
	if err := task.CheckName("ReplyChannel", c.ReplyChannel); err != nil {
		return fmt.Errorf("client: config: %w", err)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Broker.ClientID == "" {
		c.Broker.ClientID = "inferq-client-" + c.Identity
	}
	if c.Broker.Logger == nil {
		c.Broker.Logger = c.Logger
	}
	if err := c.Broker.Validate(); err != nil {
		return fmt.Errorf("client: config: broker: %w", err)
	}
	if c.MaxReceiveCount < 0 {
		return errors.New("client: config: negative MaxReceiveCount")
	}
	if c.QueuePrefix == "" {
		c.QueuePrefix = DefaultQueuePrefix
	}
	if c.ResultPrefix == "" {
		c.ResultPrefix = DefaultResultPrefix
	}
	if c.HTTPURL != "" {
		if err := checkHTTPURL(c.HTTPURL); err != nil {
			return fmt.Errorf("client: config: HTTPURL %q %w", c.HTTPURL, err)
		}
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{}
	}
	setDefault(&c.CompatExpiry, DefaultCompatExpiry)
	setDefault(&c.MaxUnclaimed, 10000)
	setDefault(&c.UnclaimedTTL, 10*time.Minute)
	setDefault(&c.DedupWindow, 100000)
	setDefault(&c.CursorInterval, time.Second)
	setDefault(&c.ReadyRetry, 200*time.Millisecond)
	setDefault(&c.SendRetryFor, 2*time.Minute)
	return nil
}

func setDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}
