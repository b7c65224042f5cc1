// Package scaler is a KEDA external scaler (KEDA's externalscaler.proto,
// package externalscalerpb) that scales inferq on the depth of its KubeMQ
// task queues as the broker reports it (QueuesInfo). It needs no inferq
// replica to run, so a ScaledObject can take the Deployment to zero and back.
//
// Depth is the sum of the queues' Waiting counters. KubeMQ counts in Waiting
// the messages ready for delivery and those delivered and not yet settled
// (KUBEMQ.md trap 14: in-flight tasks, and messages stranded in partly
// settled polls, trap 13); delayed messages (a retry's DelaySeconds) are
// not counted until they are due. With no replica running nothing is in
// flight, so the depth is what waits; with replicas running it is the work
// they have not finished, which is what a per-replica target divides.
//
// Files: scaler.go (Config, Scaler, the RPCs), metadata.go (the
// ScaledObject's metadata), serve.go (the gRPC server, health, stop).
package scaler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/inferq/inferq/lograte"
	"github.com/inferq/inferq/mq"
	pb "github.com/inferq/inferq/scaler/externalscalerpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Broker is what the scaler needs of KubeMQ; *mq.Conn is one.
type Broker interface {
	// QueuesInfo returns the queue channels matching filter (names
	// separated by ';') by the name the broker reports.
	QueuesInfo(ctx context.Context, filter string) (map[string]mq.QueueInfo, error)
}

// Defaults and bounds of Config.
const (
	DefaultPollInterval = 2 * time.Second
	DefaultCallTimeout  = 5 * time.Second
	DefaultStopGrace    = 5 * time.Second
	minPollInterval     = 100 * time.Millisecond
	maxPollInterval     = 10 * time.Minute
)

// Config configures a Scaler.
type Config struct {
	// Broker reads the queue depths. Required.
	Broker Broker
	// PollInterval is how often a StreamIsActive stream reads the depth
	// (one QueuesInfo call per stream, ~10 ms on a broker with thousands
	// of channels). Default 2 s; from 100 ms to 10 min.
	PollInterval time.Duration
	// CallTimeout bounds one depth read, so that a broker that does not
	// answer fails the RPC instead of holding it. Default 5 s.
	CallTimeout time.Duration
	// StopGrace is how long Serve waits, once its context ends, for the
	// unary calls in flight before it cuts them. Default 5 s.
	StopGrace time.Duration
	// Logger receives the scaler's logs. Default: discard.
	Logger *slog.Logger
	// LogRepeatEvery is how often a repeated warning (a failing broker,
	// a ScaledObject with bad metadata, asked again on every poll) is
	// logged at most. Default 1 min.
	LogRepeatEvery time.Duration
}

func (c *Config) setDefaults() {
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.StopGrace == 0 {
		c.StopGrace = DefaultStopGrace
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.LogRepeatEvery == 0 {
		c.LogRepeatEvery = time.Minute
	}
}

// Validate fills the defaults and checks c; its errors name the field.
func (c *Config) Validate() error {
	c.setDefaults()
	switch {
	case c.Broker == nil:
		return errors.New("scaler: config: Broker is nil")
	case c.PollInterval < minPollInterval || c.PollInterval > maxPollInterval:
		return fmt.Errorf("scaler: config: PollInterval %v is outside [%v, %v]", c.PollInterval, minPollInterval, maxPollInterval)
	case c.CallTimeout < 0:
		return fmt.Errorf("scaler: config: CallTimeout %v is negative", c.CallTimeout)
	case c.StopGrace < 0:
		return fmt.Errorf("scaler: config: StopGrace %v is negative", c.StopGrace)
	}
	return nil
}

// Scaler implements KEDA's ExternalScaler service. Its methods are safe
// for concurrent use; each RPC reads the broker afresh (no cache: KEDA asks
// once per pollingInterval per ScaledObject).
type Scaler struct {
	pb.UnimplementedExternalScalerServer

	cfg  Config
	log  *slog.Logger
	warn *lograte.Limiter
	// quit is closed when Serve's context ends: open StreamIsActive
	// streams return, so that the server can stop gracefully.
	quit chan struct{}
}

// New validates cfg and returns a Scaler. Serve it with Serve, or register
// it on a gRPC server of your own.
func New(cfg Config) (*Scaler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Scaler{cfg: cfg, log: cfg.Logger, warn: lograte.New(cfg.Logger, cfg.LogRepeatEvery), quit: make(chan struct{})}, nil
}

// IsActive reports whether the ScaledObject's queues hold more than its
// activationDepth: KEDA scales from zero when it turns true and back to
// minReplicaCount when it stays false through the cooldown.
func (s *Scaler) IsActive(ctx context.Context, ref *pb.ScaledObjectRef) (*pb.IsActiveResponse, error) {
	t, err := s.target(ref)
	if err != nil {
		return nil, err
	}
	d, err := s.depth(ctx, ref, t)
	if err != nil {
		return nil, err
	}
	return &pb.IsActiveResponse{Result: t.Active(d)}, nil
}

// GetMetricSpec returns the one metric, MetricName, with the target depth
// per replica.
func (s *Scaler) GetMetricSpec(_ context.Context, ref *pb.ScaledObjectRef) (*pb.GetMetricSpecResponse, error) {
	t, err := s.target(ref)
	if err != nil {
		return nil, err
	}
	return &pb.GetMetricSpecResponse{MetricSpecs: []*pb.MetricSpec{{
		MetricName: MetricName, TargetSize: t.TargetDepth, TargetSizeFloat: float64(t.TargetDepth),
	}}}, nil
}

// GetMetrics returns the depth of the ScaledObject's queues. Both the
// integer and the float fields are set: KEDA before v2.17 reads only the
// integer. The request's metricName is not checked: KEDA asks by the name
// GetMetricSpec gave, and there is one metric.
func (s *Scaler) GetMetrics(ctx context.Context, req *pb.GetMetricsRequest) (*pb.GetMetricsResponse, error) {
	ref := req.GetScaledObjectRef()
	if ref == nil {
		return nil, status.Error(codes.InvalidArgument, "scaler: GetMetricsRequest.scaledObjectRef is missing")
	}
	t, err := s.target(ref)
	if err != nil {
		return nil, err
	}
	d, err := s.depth(ctx, ref, t)
	if err != nil {
		return nil, err
	}
	return &pb.GetMetricsResponse{MetricValues: []*pb.MetricValue{{
		MetricName: MetricName, MetricValue: d, MetricValueFloat: float64(d),
	}}}, nil
}

// StreamIsActive sends whether the target is active at once, then reads
// the depth every PollInterval and sends the state again when it changes
// (KEDA acts on every message it gets). It ends when the client cancels,
// or with nil when Serve stops (KEDA takes a clean end as a reason to open
// a new stream 2 s later, without growing its backoff). A depth read that
// fails after the first is logged and retried at the next tick, not sent:
// a broker blip of a few seconds (KUBEMQ.md trap 9) must not end the
// stream, as KEDA backs off up to a minute after errors before it opens
// another.
func (s *Scaler) StreamIsActive(ref *pb.ScaledObjectRef, stream pb.ExternalScaler_StreamIsActiveServer) error {
	ctx := stream.Context()
	t, err := s.target(ref)
	if err != nil {
		return err
	}
	d, err := s.depth(ctx, ref, t)
	if err != nil {
		return err
	}
	last := t.Active(d)
	if err := stream.Send(&pb.IsActiveResponse{Result: last}); err != nil {
		return err
	}
	tick := time.NewTicker(s.cfg.PollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-s.quit:
			return nil
		case <-tick.C:
		}
		d, err := s.depth(ctx, ref, t)
		if err != nil {
			continue // logged by depth; a cancelled ctx ends the loop above
		}
		if a := t.Active(d); a != last {
			if err := stream.Send(&pb.IsActiveResponse{Result: a}); err != nil {
				return err
			}
			last = a
			s.log.Debug("stream is active changed", "scaled_object", objName(ref), "active", a, "depth", d)
		}
	}
}

// target parses ref's metadata; a bad one is InvalidArgument.
func (s *Scaler) target(ref *pb.ScaledObjectRef) (Target, error) {
	t, err := ParseTarget(ref.GetScalerMetadata())
	if err != nil {
		s.warn.Warn("bad scaler metadata", "scaled_object", objName(ref), "err", err)
		return Target{}, status.Errorf(codes.InvalidArgument, "ScaledObject %s: %v", objName(ref), err)
	}
	return t, nil
}

// depth sums the Waiting counters of t's queues, read in one QueuesInfo
// call bounded by CallTimeout. A queue the broker does not report (it never
// held a message) counts 0. The real broker reports names trimmed of the
// characters of "_QUEUES." and matches the filter against those (mq.InfoName),
// the embedded broker the names as sent: the filter carries both. Errors
// are gRPC statuses.
func (s *Scaler) depth(ctx context.Context, ref *pb.ScaledObjectRef, t Target) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	infos, err := s.cfg.Broker.QueuesInfo(ctx, mq.InfoFilter(t.Queues...))
	if err != nil {
		return 0, s.brokerError(ref, err)
	}
	var sum int64
	for _, q := range t.Queues {
		info, _ := mq.LookupInfo(infos, q)
		sum += max(info.Waiting, 0)
	}
	return sum, nil
}

// brokerError turns a failed depth read into a gRPC status: the caller's
// own cancellation stays Canceled (and is not logged), the rest is
// Unavailable (retryable: KEDA asks again at its next poll).
func (s *Scaler) brokerError(ref *pb.ScaledObjectRef, err error) error {
	if errors.Is(err, context.Canceled) {
		return status.FromContextError(err).Err()
	}
	s.warn.Warn("queue depth read failed", "scaled_object", objName(ref), "err", err)
	return status.Errorf(codes.Unavailable, "scaler: read queue depth from KubeMQ: %v", err)
}

// objName is the ScaledObject's namespace/name, for errors and logs.
func objName(ref *pb.ScaledObjectRef) string {
	if ref.GetNamespace() == "" {
		return ref.GetName()
	}
	return ref.GetNamespace() + "/" + ref.GetName()
}
