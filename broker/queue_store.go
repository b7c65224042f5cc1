package broker

import (
	"context"

	pb "github.com/kubemq-io/protobuf/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// queueStore holds every queue channel. (stub: owned by the queue work)
type queueStore struct{ opts *Options }

func newQueueStore(opts *Options) *queueStore { return &queueStore{opts: opts} }
func (q *queueStore) close()                  {}

func unimplemented(what string) error {
	return status.Errorf(codes.Unimplemented, "broker: %s is not served by the embedded broker", what)
}

func (s *Server) SendQueueMessage(context.Context, *pb.QueueMessage) (*pb.SendQueueMessageResult, error) {
	return nil, unimplemented("SendQueueMessage")
}
func (s *Server) SendQueueMessagesBatch(context.Context, *pb.QueueMessagesBatchRequest) (*pb.QueueMessagesBatchResponse, error) {
	return nil, unimplemented("SendQueueMessagesBatch")
}
func (s *Server) ReceiveQueueMessages(context.Context, *pb.ReceiveQueueMessagesRequest) (*pb.ReceiveQueueMessagesResponse, error) {
	return nil, unimplemented("ReceiveQueueMessages")
}
func (s *Server) StreamQueueMessage(pb.Kubemq_StreamQueueMessageServer) error {
	return unimplemented("StreamQueueMessage")
}
func (s *Server) AckAllQueueMessages(context.Context, *pb.AckAllQueueMessagesRequest) (*pb.AckAllQueueMessagesResponse, error) {
	return nil, unimplemented("AckAllQueueMessages")
}
func (s *Server) QueuesDownstream(pb.Kubemq_QueuesDownstreamServer) error {
	return unimplemented("QueuesDownstream")
}
func (s *Server) QueuesUpstream(pb.Kubemq_QueuesUpstreamServer) error {
	return unimplemented("QueuesUpstream")
}
func (s *Server) QueuesInfo(context.Context, *pb.QueuesInfoRequest) (*pb.QueuesInfoResponse, error) {
	return nil, unimplemented("QueuesInfo")
}
