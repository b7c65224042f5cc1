package client

import (
	"context"
	"fmt"
	"time"

	"github.com/inferq/inferq/task"
)

// Status returns what is known of task id without waiting for it to end:
//   - a record the Client holds (arrived, not yet waited for);
//   - a PENDING record for a task this Client enqueued with a reply_to whose
//     record has not come (the reply channel is not polled);
//   - otherwise the oldest record of the compat channel
//     ResultPrefix + id (WithCompat tasks, or tasks of Python producers),
//     read with a peek, or a PENDING record when the channel is empty.
//
// A peek that finds nothing costs the broker's wait floor (about 1 s on
// KubeMQ) and does not use the stream poll pool (trap 11). Status does not
// hand out records: a later Wait still gets them. It returns ErrReturned for
// a task whose record Wait already handed out. A held record is the one Wait
// will return: treat it as read-only. Safe for concurrent use; ctx bounds
// the call.
func (c *Client) Status(ctx context.Context, id string) (*task.Record, error) {
	rec, expected, done := c.tab.state(id)
	switch {
	case rec != nil:
		return rec, nil
	case expected:
		return &task.Record{TaskID: id, Status: task.StatusPending}, nil
	case done:
		return nil, ErrReturned
	}
	ch := c.cfg.ResultPrefix + id
	msgs, err := c.conn.Peek(ctx, ch, 1, time.Second)
	if err != nil {
		return nil, fmt.Errorf("client: status of %s: %w", id, err)
	}
	if len(msgs) == 0 {
		return &task.Record{TaskID: id, Status: task.StatusPending}, nil
	}
	rec, err = task.ParseRecord(msgs[0].Body)
	if err != nil {
		return nil, fmt.Errorf("client: status of %s: record on %s: %w", id, ch, err)
	}
	return rec, nil
}
