package broker_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/inferq/inferq/broker"
	pb "github.com/kubemq-io/protobuf/go"
)

// TestQueueByteBound (issue 27 item 5): a queue holds at most
// MaxQueueBytes (bodies, metadata, tags, ids and 256 bytes each); a send
// past it is refused with an error naming the queue and the bound, while
// other queues take sends; messages delivered and not settled still count,
// and acking them makes room. With a data dir nothing refused comes back
// after a restart.
func TestQueueByteBound(t *testing.T) {
	t.Parallel()
	for _, dataDir := range []bool{false, true} {
		t.Run(fmt.Sprintf("data dir %v", dataDir), func(t *testing.T) {
			t.Parallel()
			const bound = 64 << 10
			dir := t.TempDir()
			bounded := func(o *broker.Options) {
				o.MaxQueueBytes = bound
				if !dataDir {
					o.DataDir = ""
				}
			}
			var (
				srv *broker.Server
				c   pb.KubemqClient
			)
			if dataDir {
				srv, c = openData(t, dir, bounded)
			} else {
				opts := fastOpts
				bounded(&opts)
				srv = broker.New(opts)
				t.Cleanup(func() { srv.Close() })
				if err := srv.Start("127.0.0.1:0"); err != nil {
					t.Fatal(err)
				}
				c = rawClient(t, srv.Addr())
			}
			ctx := context.Background()
			body := strings.Repeat("b", 10<<10)
			send := func(ch, id string) *pb.SendQueueMessageResult {
				t.Helper()
				res, err := c.SendQueueMessage(ctx, &pb.QueueMessage{MessageID: id, ClientID: "raw", Channel: ch, Body: []byte(body)})
				if err != nil {
					t.Fatalf("send %s: %v", id, err)
				}
				return res
			}
			var sent []string
			for i := 0; ; i++ {
				id := fmt.Sprintf("m%02d", i)
				res := send(ch1, id)
				if res.IsError {
					if !strings.Contains(res.Error, "queue "+ch1+" is full") || !strings.Contains(res.Error, fmt.Sprint(bound)) {
						t.Errorf("refusal = %q, want the queue and its bound named", res.Error)
					}
					break
				}
				sent = append(sent, id)
				if i > 10 {
					t.Fatalf("%d sends of 10 KiB taken by a queue bounded at 64 KiB", i+1)
				}
			}
			if len(sent) < 5 {
				t.Fatalf("only %d sends of 10 KiB taken below a bound of 64 KiB", len(sent))
			}
			if res := send("other", "o1"); res.IsError {
				t.Errorf("send to another queue: %s", res.Error)
			}
			// Delivered and not settled: still held.
			d := openDownstream(t, c)
			r := d.get(ch1, 2, 0)
			if len(r.Messages) != 2 {
				t.Fatalf("polled %d, want 2", len(r.Messages))
			}
			if res := send(ch1, "held"); !res.IsError {
				t.Errorf("send while the delivered messages are not settled was taken")
			}
			settle(d, pb.QueuesDownstreamRequestType_AckAll, r.TransactionId)
			if res := send(ch1, "after"); res.IsError {
				t.Errorf("send after an ack made room: %s", res.Error)
			}
			if !dataDir {
				return
			}
			srv.Close()
			srv, _ = openData(t, dir, bounded)
			want := append(slices.Clone(sent[2:]), "after")
			var got []string
			for _, m := range srv.QueueSnapshot(ch1).Waiting {
				got = append(got, m.MessageID)
			}
			if !slices.Equal(got, want) {
				t.Errorf("after a restart: %v, want %v", got, want)
			}
		})
	}
}
