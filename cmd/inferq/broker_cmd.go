package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/inferq/inferq/broker"
	"github.com/spf13/pflag"
)

func runBroker(ctx context.Context, a *app, args []string) error {
	fs := a.newFlags("broker", "broker [--listen ADDR] [--data-dir DIR] [--auth-token-file FILE] [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]", `Run inferq's embedded broker: an in-process server of the KubeMQ gRPC protocol
subset that kubemq-go v1.9.0 uses (queues, queue streams, events, events store,
queries). Producers and inferq connect to it as to a KubeMQ broker.

Without --data-dir it keeps everything in memory: messages are lost when it
stops. With --data-dir DIR (or $INFERQ_BROKER_DATA_DIR) it also writes every
change to a log in DIR and loads it at start: queue messages (with their
receive counts, delays, expirations and dead-letter moves) and the events
store survive a restart or a crash (kill -9). Every send, ack, nack, requeue
and events store send is answered after it is fsynced (concurrent ones share
an fsync); a message delivered and not yet acked comes back after a restart
(at least once), an acked one never does. One broker per DIR.

Each events store channel keeps its events for --retention, and at most
--events-store-max-events of them and --events-store-max-bytes in all (bodies,
metadata, tags): past either, the oldest go first, in memory and on disk.

It is single node and NOT FOR PRODUCTION; it exists for tests, demos and
'inferq serve --embedded-broker' (whose config takes broker.data_dir and
broker.events_store_max_events/bytes). It runs until SIGINT or SIGTERM.

Security, to try inferq's broker.auth_token and broker.tls without a real
KubeMQ: with an auth token (--auth-token, --auth-token-file or
$INFERQ_BROKER_AUTH_TOKEN; never printed) every call, Ping included, must
carry it in the gRPC metadata "authorization", as the KubeMQ SDKs send it;
others are refused with Unauthenticated. --tls-cert and --tls-key serve TLS;
--tls-client-ca also requires a client certificate signed by that CA (mTLS).`)
	listen := fs.String("listen", "127.0.0.1:50000", "address to serve gRPC on (host:port)")
	retention := fs.Duration("retention", 24*time.Hour, "how long events store messages are kept")
	dataDir := fs.String("data-dir", "", "keep queues and events store on disk in this directory (created if missing) and load them at start (default $INFERQ_BROKER_DATA_DIR; empty: in memory)")
	maxEvents := fs.Int("events-store-max-events", broker.DefaultEventsStoreMaxEvents, "most events kept per events store channel, oldest dropped first (negative: no bound)")
	maxBytes := fs.Int64("events-store-max-bytes", broker.DefaultEventsStoreMaxBytes, "most bytes (bodies, metadata, tags) kept per events store channel, oldest dropped first (negative: no bound)")
	var sf brokerSecurityFlags
	sf.register(fs)
	var lf logFlags
	lf.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if len(fs.Args()) > 0 {
		return usageErrorf("unexpected arguments %q", fs.Args())
	}
	log, err := lf.logger(a)
	if err != nil {
		return err
	}
	token, files, err := sf.resolve(a.getenv)
	if err != nil {
		return err
	}
	if *dataDir == "" {
		*dataDir = a.getenv("INFERQ_BROKER_DATA_DIR")
	}
	if *maxEvents == 0 || *maxBytes == 0 {
		return usageErrorf("--events-store-max-events and --events-store-max-bytes cannot be 0 (negative: no bound)")
	}
	srv, err := broker.Open(broker.Options{Retention: *retention, Logger: log, AuthToken: token, TLS: files,
		DataDir: *dataDir, EventsStoreMaxEvents: *maxEvents, EventsStoreMaxBytes: *maxBytes})
	if err != nil {
		return err
	}
	if err := srv.Start(*listen); err != nil {
		srv.Close()
		return err
	}
	fmt.Fprintf(a.stdout, "embedded KubeMQ-protocol broker listening on %s (%s, not for production%s); Ctrl-C stops it\n", srv.Addr(), dataDirOrMemory(*dataDir), security(token, files))
	<-ctx.Done()
	log.Info("broker stopping")
	return srv.Close()
}

// dataDirOrMemory says where the embedded broker keeps its data.
func dataDirOrMemory(dir string) string {
	if dir == "" {
		return "in memory"
	}
	return "data in " + dir
}

// security describes the broker's token and TLS for its start line, without
// the token.
func security(token string, files broker.TLSFiles) string {
	var parts []string
	switch {
	case files.ClientCA != "":
		parts = append(parts, "mutual TLS")
	case files.Enabled():
		parts = append(parts, "TLS")
	}
	if token != "" {
		parts = append(parts, "auth token required")
	}
	if len(parts) == 0 {
		return ""
	}
	return ", " + strings.Join(parts, ", ")
}

// brokerSecurityFlags are the embedded broker's token and TLS flags.
type brokerSecurityFlags struct {
	token, tokenFile string
	cert, key, ca    string
}

func (f *brokerSecurityFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.token, "auth-token", "", "token every call must carry in metadata authorization (default $INFERQ_BROKER_AUTH_TOKEN; prefer --auth-token-file: a flag shows in ps)")
	fs.StringVar(&f.tokenFile, "auth-token-file", "", "file holding the auth token (surrounding white space trimmed)")
	fs.StringVar(&f.cert, "tls-cert", "", "serve TLS with this certificate (PEM; with --tls-key)")
	fs.StringVar(&f.key, "tls-key", "", "the private key of --tls-cert (PEM)")
	fs.StringVar(&f.ca, "tls-client-ca", "", "require client certificates signed by this CA (PEM): mutual TLS; needs --tls-cert and --tls-key")
}

// resolve returns the token (flag, file, then $INFERQ_BROKER_AUTH_TOKEN)
// and the TLS files, refusing half a configuration with the flag's name.
func (f *brokerSecurityFlags) resolve(getenv func(string) string) (string, broker.TLSFiles, error) {
	files := broker.TLSFiles{Cert: f.cert, Key: f.key, ClientCA: f.ca}
	switch {
	case f.cert != "" && f.key == "":
		return "", files, usageErrorf("--tls-cert needs --tls-key")
	case f.key != "" && f.cert == "":
		return "", files, usageErrorf("--tls-key needs --tls-cert")
	case f.ca != "" && f.cert == "":
		return "", files, usageErrorf("--tls-client-ca needs --tls-cert and --tls-key")
	}
	if f.token != "" && f.tokenFile != "" {
		return "", files, usageErrorf("--auth-token and --auth-token-file are exclusive")
	}
	token := f.token
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return "", files, fmt.Errorf("--auth-token-file: %w", err)
		}
		if token = strings.TrimSpace(string(b)); token == "" {
			return "", files, fmt.Errorf("--auth-token-file: %s is empty", f.tokenFile)
		}
	}
	if token == "" {
		token = getenv("INFERQ_BROKER_AUTH_TOKEN")
	}
	return token, files, nil
}
