package broker

import (
	"context"

	pb "github.com/kubemq-io/protobuf/go"
)

// pubSub holds events, events store channels and query subscribers. (stub: owned by the pub/sub work)
type pubSub struct{ opts *Options }

func newPubSub(opts *Options) *pubSub { return &pubSub{opts: opts} }
func (p *pubSub) close()              {}

func (s *Server) SendEvent(context.Context, *pb.Event) (*pb.Result, error) {
	return nil, unimplemented("SendEvent")
}
func (s *Server) SendEventsStream(pb.Kubemq_SendEventsStreamServer) error {
	return unimplemented("SendEventsStream")
}
func (s *Server) SubscribeToEvents(*pb.Subscribe, pb.Kubemq_SubscribeToEventsServer) error {
	return unimplemented("SubscribeToEvents")
}
func (s *Server) SubscribeToRequests(*pb.Subscribe, pb.Kubemq_SubscribeToRequestsServer) error {
	return unimplemented("SubscribeToRequests")
}
func (s *Server) SendRequest(context.Context, *pb.Request) (*pb.Response, error) {
	return nil, unimplemented("SendRequest")
}
func (s *Server) SendResponse(context.Context, *pb.Response) (*pb.Empty, error) {
	return nil, unimplemented("SendResponse")
}
