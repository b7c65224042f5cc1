package results

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// nopBroker accepts everything at once: the benchmarks measure the store's
// own cost per record.
type nopBroker struct{}

func (nopBroker) SendEventStore(context.Context, string, []byte, map[string]string) error {
	return nil
}
func (nopBroker) SendQueue(context.Context, string, []byte, time.Duration, string) error { return nil }
func (nopBroker) RemoveOld(context.Context, string, time.Duration, string, int) (Old, int, error) {
	return OldOwn, 0, nil
}

func BenchmarkPut(b *testing.B) {
	body := make([]byte, 512)
	for _, bc := range []struct {
		name    string
		replyTo string
	}{{"reply", "replies"}, {"compat", ""}} {
		b.Run(bc.name, func(b *testing.B) {
			s := newStore(b, Config{Broker: nopBroker{}, Logger: discard(), MemoryOnly: true})
			var n atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := "task-" + strconv.FormatInt(n.Add(1), 10)
					e := Entry{TaskID: id, Status: "SUCCESS", Terminal: true, Body: body, ReplyTo: bc.replyTo,
						CreatedAt: time.Now()}
					if err := s.Put(context.Background(), e); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
