package main

import (
	"context"
	"fmt"
	"net"

	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/scaler"
)

const scalerHelp = `Serve KEDA's external scaler protocol (externalscaler.proto: IsActive,
StreamIsActive, GetMetricSpec, GetMetrics) on the depth of KubeMQ queues, read
from the broker (QueuesInfo): no inferq replica needs to run, so a ScaledObject
can scale inferq from zero. Point a ScaledObject trigger at it:

  triggers:
    - type: external          # or external-push (StreamIsActive)
      metadata:
        scalerAddress: inferq-scaler.inferq.svc.cluster.local:6000
        queue: inferq.resnet18  # several: comma-separated, depths summed
        targetDepth: "256"      # waiting tasks per replica (required)
        activationDepth: "0"    # active above this depth (default 0)

Depth is the queues' Waiting count: tasks ready for delivery plus those
delivered and not yet acked. A missing or invalid field is answered with
InvalidArgument naming it. gRPC health (grpc.health.v1) is served on the same
port.

The broker (address, client id, auth token, TLS) comes from the same places as
for 'inferq serve': the config file's broker section when --config (or
INFERQ_CONFIG) is given, then the environment (INFERQ_BROKER_ADDRESS or
KUBEMQ_ADDRESS, INFERQ_AUTH_TOKEN or KUBEMQ_AUTH_TOKEN, INFERQ_TLS_* or
KUBEMQ_TLS_*_FILE), then --broker and --client-id.

--listen defaults to loopback: the protocol has no authentication and tells
queue depths to whoever asks. In a cluster set 0.0.0.0:6000 (the manifests
do) and let a NetworkPolicy restrict who reaches it (it serves no TLS).

SIGINT/SIGTERM stops it: health turns NOT_SERVING, open streams end (KEDA
opens a new one 2 s later), calls in flight get --shutdown-grace.`

func runScaler(ctx context.Context, a *app, args []string) error {
	fs := a.newFlags("scaler", "scaler [flags]", scalerHelp)
	var cf configFlags
	fs.StringVarP(&cf.path, "config", "c", "", "YAML config file whose broker section to use (env INFERQ_CONFIG; optional)")
	fs.StringVar(&cf.broker, "broker", "", "KubeMQ gRPC address host:port (env INFERQ_BROKER_ADDRESS or KUBEMQ_ADDRESS; default 127.0.0.1:50000)")
	fs.StringVar(&cf.clientID, "client-id", "", "KubeMQ client id (env INFERQ_CLIENT_ID; default inferq-scaler, or the config file's)")
	listen := fs.String("listen", "127.0.0.1:6000", "gRPC address KEDA calls (host:port); loopback by default, 0.0.0.0:6000 in a cluster")
	poll := fs.Duration("poll-interval", scaler.DefaultPollInterval, "how often an open StreamIsActive stream reads the depth (100ms to 10m)")
	callTimeout := fs.Duration("call-timeout", scaler.DefaultCallTimeout, "longest wait for the broker's answer to one depth read")
	grace := fs.Duration("shutdown-grace", scaler.DefaultStopGrace, "on SIGTERM, how long calls in flight may take to finish")
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
	b, err := a.scalerBroker(cf)
	if err != nil {
		return err
	}
	mc := brokerConn(b)
	mc.Logger = log.With("component", "mq")
	conn, err := mq.Dial(ctx, mc)
	if err != nil {
		return err
	}
	defer conn.Close()
	s, err := scaler.New(scaler.Config{Broker: conn, PollInterval: *poll, CallTimeout: *callTimeout,
		StopGrace: *grace, Logger: log.With("component", "scaler")})
	if err != nil {
		return usageErrorf("%v", err)
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	log.Info("scaler starting", "listen", lis.Addr().String(), "broker", b.Address)
	return s.Serve(ctx, lis)
}

// scalerClientID names the scaler to the broker unless told otherwise.
const scalerClientID = "inferq-scaler"

// scalerBroker is the broker section the scaler uses: the config file's
// (validated as serve validates it) when one is named, else the
// environment's and the flags' over the defaults. Config files are not
// required: the scaler needs only the broker.
func (a *app) scalerBroker(f configFlags) (models.Broker, error) {
	if f.path != "" || a.getenv("INFERQ_CONFIG") != "" {
		c, err := a.loadConfig(f)
		if err != nil {
			return models.Broker{}, err
		}
		return c.Broker, nil
	}
	c := a.envConfig()
	if f.broker != "" {
		c.Broker.Address = f.broker
	}
	if f.clientID != "" {
		c.Broker.ClientID = f.clientID
	}
	if c.Broker.ClientID == "" {
		c.Broker.ClientID = scalerClientID
	}
	if c.Broker.Address == "" {
		c.Broker.Address = models.DefaultBrokerAddress
	}
	if (c.Broker.TLS.Cert == "") != (c.Broker.TLS.Key == "") {
		return models.Broker{}, usageErrorf("broker TLS: a client certificate and its key must be set together (INFERQ_TLS_CERT and INFERQ_TLS_KEY)")
	}
	return c.Broker, nil
}
