// Command agestore ages a KubeMQ store the way Python-adapter traffic does:
// it makes N per-task result channels (rayserve-result-<id>), each holding
// one waiting record of about 400 bytes with the adapter's 3600 s expiry.
// Fleet and burst measurements then run on a store that holds thousands of
// channels, as a production one does (KubeMQ keeps channels 24 h).
//
//	go run ./scripts/agestore -broker 127.0.0.1:50000 -channels 3000
//
// Each channel costs the broker three open files: stay well under its file
// limit (docs/operating.md, "Running against a real KubeMQ").
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"strings"
	"time"

	pb "github.com/kubemq-io/protobuf/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	addr := flag.String("broker", "127.0.0.1:50000", "KubeMQ gRPC address")
	n := flag.Int("channels", 3000, "result channels to make, one waiting record each")
	expiry := flag.Int("expiry", 3600, "each record's expiration, seconds (the adapter's)")
	prefix := flag.String("prefix", "rayserve-result-age-"+time.Now().Format("150405"), "channel name prefix")
	flag.Parse()
	if err := run(*addr, *n, *expiry, *prefix); err != nil {
		log.Fatalf("agestore: %v", err)
	}
}

func run(addr string, n, expiry int, prefix string) error {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial %s: %w", addr, err)
	}
	defer cc.Close()
	c := pb.NewKubemqClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pad := strings.Repeat("x", 300)
	start := time.Now()
	for i := 0; i < n; i += 100 {
		req := &pb.QueueMessagesBatchRequest{BatchID: fmt.Sprintf("age-%d", i)}
		for j := i; j < min(n, i+100); j++ {
			id := fmt.Sprintf("%s-%06d", prefix, j)
			body := fmt.Sprintf(`{"task_id":"%s","status":"PENDING","result":null,"error":null,"created_at":"%s","pad":"%s"}`,
				id, time.Now().UTC().Format(time.RFC3339Nano), pad)
			req.Messages = append(req.Messages, &pb.QueueMessage{ClientID: "agestore", Channel: id, Body: []byte(body),
				Policy: &pb.QueueMessagePolicy{ExpirationSeconds: int32(expiry)}})
		}
		res, err := c.SendQueueMessagesBatch(ctx, req)
		if err != nil {
			return fmt.Errorf("send channels %d-%d: %w", i, i+len(req.Messages)-1, err)
		}
		if res.HaveErrors {
			for _, r := range res.Results {
				if r.IsError {
					return fmt.Errorf("send channels %d-%d: %s", i, i+len(req.Messages)-1, r.Error)
				}
			}
		}
		if (i/100)%10 == 9 {
			log.Printf("agestore: %d of %d channels made", i+100, n)
		}
	}
	info, err := c.QueuesInfo(ctx, &pb.QueuesInfoRequest{RequestID: "agestore", QueueName: ""})
	if err != nil {
		return fmt.Errorf("count channels: %w", err)
	}
	fmt.Printf("agestore: made %d channels in %v; the broker now reports %d queue channels\n",
		n, time.Since(start).Round(time.Millisecond), len(info.GetInfo().GetQueues()))
	return nil
}
