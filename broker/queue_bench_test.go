package broker_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	qs "github.com/kubemq-io/kubemq-go/queues_stream"
)

// The benchmarks run through kubemq-go against the embedded broker and,
// when KUBEMQ_ADDRESS is set, a real KubeMQ, and report msgs/s. Reference
// (real KubeMQ on this kind of machine): ~150k msgs/s batch send, ~59k
// msgs/s poll 128 + ack-all.

func benchStream(b *testing.B, tg *target) (*qs.QueuesStreamClient, context.Context) {
	b.Helper()
	host, port := tg.hostPort(b)
	ctx, cancel := context.WithCancel(context.Background())
	c, err := qs.NewQueuesStreamClient(ctx, qs.WithAddress(host, port), qs.WithClientId("bench"))
	if err != nil {
		cancel()
		b.Fatalf("client: %v", err)
	}
	b.Cleanup(func() {
		_ = c.Close()
		cancel()
	})
	return c, ctx
}

// benchChannel names a channel unique to this run (a real broker keeps
// channels for 24 h).
func benchChannel(prefix string) string {
	return prefix + "." + strconv.FormatInt(time.Now().UnixNano(), 36)
}

func benchBatch(ch string, n int) []*qs.QueueMessage {
	body := make([]byte, 200)
	msgs := make([]*qs.QueueMessage, n)
	for i := range msgs {
		msgs[i] = qs.NewQueueMessage().SetChannel(ch).SetBody(body)
	}
	return msgs
}

func benchSend(b *testing.B, ctx context.Context, c *qs.QueuesStreamClient, msgs []*qs.QueueMessage) {
	b.Helper()
	res, err := c.Send(ctx, msgs...)
	if err != nil {
		b.Fatalf("send: %v", err)
	}
	if res.Results[0].IsError {
		b.Fatalf("send: %s", res.Results[0].Error)
	}
}

// BenchmarkQueueSendBatch1000 sends batches of 1000 200-byte messages with
// QueuesStreamClient.Send.
func BenchmarkQueueSendBatch1000(b *testing.B) {
	for _, tg := range newTargets(b) {
		b.Run(tg.Name, func(b *testing.B) {
			c, ctx := benchStream(b, tg)
			ch := benchChannel("bench.send")
			msgs := benchBatch(ch, 1000)
			benchSend(b, ctx, c, msgs[:1]) // open the stream (trap 3)
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				for _, m := range msgs {
					m.MessageID = "" // let the broker give ids, as for new messages
				}
				benchSend(b, ctx, c, msgs)
			}
			b.ReportMetric(float64(b.N*1000)/time.Since(start).Seconds(), "msgs/s")
			b.StopTimer()
			if tg.Real {
				_, _ = c.AckAll(ctx, qs.NewAckAllRequest().SetChannel(ch).SetWaitTimeSeconds(1))
			}
		})
	}
}

// BenchmarkQueuePoll128AckAll drains a preloaded queue with polls of 128
// and an AckAll per poll.
func BenchmarkQueuePoll128AckAll(b *testing.B) {
	for _, tg := range newTargets(b) {
		b.Run(tg.Name, func(b *testing.B) {
			c, ctx := benchStream(b, tg)
			ch := benchChannel("bench.poll")
			msgs := benchBatch(ch, 1000)
			total := b.N * 128
			for sent := 0; sent < total; sent += len(msgs) {
				for _, m := range msgs {
					m.MessageID = ""
				}
				benchSend(b, ctx, c, msgs[:min(len(msgs), total-sent)])
			}
			// open the poll stream (trap 3) on another channel
			benchSend(b, ctx, c, benchBatch(ch+".warm", 1))
			if _, err := c.Poll(ctx, &qs.PollRequest{Channel: ch + ".warm", MaxItems: 1, WaitTimeout: 1000, AutoAck: true}); err != nil {
				b.Fatalf("warm poll: %v", err)
			}
			b.ResetTimer()
			start := time.Now()
			got := 0
			for range b.N {
				r, err := c.Poll(ctx, &qs.PollRequest{Channel: ch, MaxItems: 128, WaitTimeout: 1000})
				if err != nil {
					b.Fatalf("poll: %v", err)
				}
				got += len(r.Messages)
				if len(r.Messages) == 0 {
					continue
				}
				if err := r.AckAll(); err != nil {
					b.Fatalf("ack all: %v", err)
				}
			}
			b.ReportMetric(float64(got)/time.Since(start).Seconds(), "msgs/s")
		})
	}
}
