package brokertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/broker/brokertest"
	pb "github.com/kubemq-io/protobuf/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func dial(t *testing.T, addr string) pb.KubemqClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewKubemqClient(conn)
}

func TestServerStopRestart(t *testing.T) {
	srv := brokertest.NewServer(t, broker.Options{PollWaitFloor: 50 * time.Millisecond})
	host, port := srv.HostPort()
	if host != "127.0.0.1" || port == 0 {
		t.Fatalf("HostPort = %s %d", host, port)
	}
	ctx := context.Background()
	if _, err := dial(t, srv.Addr).SendQueueMessage(ctx, &pb.QueueMessage{ClientID: "c", Channel: "t.q", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	addr := srv.Addr
	srv.Stop()
	srv.Stop() // idempotent
	srv.Restart()
	if srv.Addr != addr {
		t.Fatalf("address moved from %s to %s", addr, srv.Addr)
	}
	if q := srv.Queue("t.q"); len(q) != 1 || string(q[0].Body) != "x" {
		t.Fatalf("queue after restart = %v", q)
	}
	if _, err := dial(t, srv.Addr).Ping(ctx, &pb.Empty{}); err != nil {
		t.Fatalf("ping after restart: %v", err)
	}
	if n := srv.InFlight("t.q"); n != 0 {
		t.Errorf("in flight = %d", n)
	}
	srv.Close()
	srv.Close() // idempotent, and again at cleanup
}
