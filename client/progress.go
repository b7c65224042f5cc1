package client

import (
	"context"
	"fmt"

	"github.com/inferq/inferq/task"
)

// ProgressSuffix makes a queue's progress channel: queue + ProgressSuffix.
const ProgressSuffix = ".progress"

// Progress subscribes to the progress events of queue (a model's queue:
// QueueOf(model)): received, running (with the batch size), stored,
// retrying and failed, as inferq publishes them on "<queue>.progress". With
// taskID set only that task's events come, and the channel closes after its
// first event at 100% (stored, or failed for good); otherwise every task's
// events come until ctx ends or the Client closes.
//
// Progress events are KubeMQ Events, not stored: those published before the
// subscription is live, or while the broker is away, are lost, and inferq
// drops events rather than slow a task down. Subscribe before enqueueing,
// and treat progress as a hint: the result record (Wait) is the truth.
// Events that cannot be read are skipped. Read the channel promptly.
func (c *Client) Progress(ctx context.Context, queue, taskID string) (<-chan task.Progress, error) {
	if queue == "" {
		return nil, fmt.Errorf("client: progress: empty queue")
	}
	select {
	case <-c.closed:
		return nil, ErrClosed
	default:
	}
	ctx, cancel := context.WithCancel(ctx)
	events, err := c.conn.SubscribeEvents(ctx, queue+ProgressSuffix, "")
	if err != nil {
		cancel()
		return nil, fmt.Errorf("client: progress of %s: %w", queue, err)
	}
	stop := context.AfterFunc(c.life, cancel)
	out := make(chan task.Progress, 64)
	go func() {
		defer close(out)
		defer stop()
		defer cancel()
		for ev := range events {
			if taskID != "" && ev.Tags[task.TagTaskID] != taskID {
				continue
			}
			p, err := task.ParseProgress(ev.Body)
			if err != nil || (taskID != "" && p.TaskID != taskID) {
				continue
			}
			select {
			case out <- p:
			case <-ctx.Done():
				return
			}
			if taskID != "" && p.Pct >= 100 {
				return
			}
		}
	}()
	return out, nil
}
