package main

import (
	"fmt"

	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/mq"
	"github.com/spf13/pflag"
)

// configFlags are the flags that override the config file. They are layered
// over the file, then the environment, in that order: file < env < flags.
type configFlags struct {
	path      string
	broker    string
	clientID  string
	http      string
	grpc      string
	dataDir   string
	advertise string
}

func (c *configFlags) register(fs *pflag.FlagSet) {
	fs.StringVarP(&c.path, "config", "c", "", "YAML config file (see configs/embedded.yaml)")
	fs.StringVar(&c.broker, "broker", "", "KubeMQ gRPC address host:port (env INFERQ_BROKER_ADDRESS or KUBEMQ_ADDRESS; default 127.0.0.1:50000)")
	fs.StringVar(&c.clientID, "client-id", "", "KubeMQ client id (env INFERQ_CLIENT_ID)")
	fs.StringVar(&c.http, "http", "", "HTTP listen address for health, metrics and task lookup (env INFERQ_HTTP_LISTEN; default 127.0.0.1:8080)")
	fs.StringVar(&c.grpc, "grpc", "", "gRPC listen address of the Open Inference Protocol (KServe v2 / Triton gRPC API; env INFERQ_GRPC_LISTEN; default 127.0.0.1:8001; grpc.listen \"\" in the config turns it off)")
	fs.StringVar(&c.advertise, "advertise-url", "", "absolute http(s) URL other hosts reach this replica's HTTP listener at; an oversized result's result_ref becomes <URL>/v1/tasks/<id> (env INFERQ_HTTP_ADVERTISE_URL; default: the relative /v1/tasks/<id>)")
	fs.StringVar(&c.dataDir, "data-dir", "", "directory for the result spool and the attempt journal, one process each (env INFERQ_DATA_DIR; default ./data unless results.spool is memory)")
}

// envVars maps each environment variable to the config field it sets. For
// each field the first variable set wins: inferq's own, then the Python
// adapter's KUBEMQ_* names.
var envVars = []struct {
	names []string
	set   func(c *models.Config, v string)
}{
	{[]string{"INFERQ_BROKER_ADDRESS", "KUBEMQ_ADDRESS"}, func(c *models.Config, v string) { c.Broker.Address = v }},
	{[]string{"INFERQ_CLIENT_ID", "KUBEMQ_CLIENT_ID"}, func(c *models.Config, v string) { c.Broker.ClientID = v }},
	{[]string{"INFERQ_AUTH_TOKEN", "KUBEMQ_AUTH_TOKEN"}, func(c *models.Config, v string) { c.Broker.AuthToken = v }},
	{[]string{"INFERQ_TLS_CERT", "KUBEMQ_TLS_CERT_FILE"}, func(c *models.Config, v string) { c.Broker.TLS.Cert = v }},
	{[]string{"INFERQ_TLS_KEY", "KUBEMQ_TLS_KEY_FILE"}, func(c *models.Config, v string) { c.Broker.TLS.Key = v }},
	{[]string{"INFERQ_TLS_CA", "KUBEMQ_TLS_CA_FILE"}, func(c *models.Config, v string) { c.Broker.TLS.CA = v }},
	{[]string{"INFERQ_HTTP_LISTEN"}, func(c *models.Config, v string) { c.HTTP.Listen = v }},
	{[]string{"INFERQ_GRPC_LISTEN"}, func(c *models.Config, v string) { c.GRPC.Listen = v }},
	// The environment's token replaces the file's, and its token file.
	{[]string{"INFERQ_HTTP_AUTH_TOKEN"}, func(c *models.Config, v string) { c.HTTP.AuthToken, c.HTTP.AuthTokenFile = v, "" }},
	{[]string{"INFERQ_DATA_DIR"}, func(c *models.Config, v string) { c.DataDir = v }},
	{[]string{"INFERQ_BROKER_DATA_DIR"}, func(c *models.Config, v string) { c.Broker.DataDir = v }},
	{[]string{"INFERQ_HTTP_ADVERTISE_URL"}, func(c *models.Config, v string) { c.HTTP.AdvertiseURL = v }},
}

// loadConfig reads the config file, then applies the environment and the
// flags, fills defaults and validates the result.
func (a *app) loadConfig(f configFlags) (*models.Config, error) {
	if f.path == "" {
		f.path = a.getenv("INFERQ_CONFIG")
	}
	if f.path == "" {
		return nil, usageErrorf("no config: pass --config FILE (or set INFERQ_CONFIG); configs/embedded.yaml is an example")
	}
	// A regular file of at most 1 MiB, never a pipe that blocks (models).
	data, err := models.ReadConfigFile(f.path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	// Parse validates the file alone; defaults below may then be replaced.
	c, err := models.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.path, err)
	}
	for _, ev := range envVars {
		for _, name := range ev.names {
			if v := a.getenv(name); v != "" {
				ev.set(c, v)
				break
			}
		}
	}
	for _, o := range []struct {
		v   string
		dst *string
	}{{f.broker, &c.Broker.Address}, {f.clientID, &c.Broker.ClientID}, {f.http, &c.HTTP.Listen}, {f.grpc, &c.GRPC.Listen}, {f.dataDir, &c.DataDir},
		{f.advertise, &c.HTTP.AdvertiseURL}} {
		if o.v != "" {
			*o.dst = o.v
		}
	}
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("config after environment and flags: %w", err)
	}
	return c, nil
}

// brokerConn is the mq connection the config's broker section describes:
// address, client id, auth token and TLS (a client certificate with Cert
// and Key).
func brokerConn(b models.Broker) mq.Config {
	return mq.Config{Address: b.Address, ClientID: b.ClientID, AuthToken: b.AuthToken,
		TLS: mq.TLS{CA: b.TLS.CA, Cert: b.TLS.Cert, Key: b.TLS.Key}}
}
