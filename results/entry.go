package results

import (
	"fmt"
	"log/slog"
	"time"
)

// Entry is one result record to store. The Store takes ownership of the
// slices: the caller must not modify Body or Substitute after Put.
type Entry struct {
	// TaskID is the task's id; it names the compat channel and the lookup key.
	TaskID string
	// Status is the record's status (PENDING, STARTED, SUCCESS, FAILURE,
	// CANCELLED); it becomes the "status" tag of a reply event.
	Status string
	// Terminal marks a final record. Only terminal records go to the compat
	// channel; a terminal record is never replaced by a later non-terminal one
	// in lookups.
	Terminal bool
	// Body is the encoded JSON record, stored whole.
	Body []byte
	// Substitute is what the broker gets instead of Body (a SUCCESS record
	// with "result": null and "result_ref"); Body then stays whole in the
	// spool for lookups. Required when Body is larger than
	// Config.MaxResultBytes; a caller with a lower limit of its own (per
	// model) sets it for smaller bodies too.
	Substitute []byte
	// ReplyTo is the Events Store channel named by the task; empty for the
	// compat channel.
	ReplyTo string
	// CreatedAt is the task's created_at: when the producer wrote its PENDING
	// record. Zero means unknown (the PENDING is assumed unexpired).
	CreatedAt time.Time
}

// LogValue keeps bodies out of logs.
func (e Entry) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("task_id", e.TaskID),
		slog.String("status", e.Status),
		slog.Bool("terminal", e.Terminal),
		slog.String("reply_to", e.ReplyTo),
		slog.Int("body_bytes", len(e.Body)),
	)
}

func (e Entry) validate(maxBytes int) error {
	switch {
	case e.TaskID == "":
		return fmt.Errorf("%w: empty task_id", ErrInvalidEntry)
	case len(e.Body) == 0:
		return fmt.Errorf("%w: task %s: empty body", ErrInvalidEntry, e.TaskID)
	case len(e.Body) > maxBytes && len(e.Substitute) == 0:
		return fmt.Errorf("%w: task %s: body of %d bytes is over max_result_bytes %d and has no substitute",
			ErrInvalidEntry, e.TaskID, len(e.Body), maxBytes)
	case len(e.Body) > maxBytes && len(e.Substitute) > maxBytes:
		return fmt.Errorf("%w: task %s: substitute of %d bytes is over max_result_bytes %d",
			ErrInvalidEntry, e.TaskID, len(e.Substitute), maxBytes)
	}
	return nil
}

// oversize reports whether the broker gets the substitute instead of Body:
// when Body is over the store's limit, or when the caller gave a substitute
// (its own limit, per model, may be lower than the store's).
func (e Entry) oversize(maxBytes int) bool { return len(e.Body) > maxBytes || len(e.Substitute) > 0 }

// wire is what the broker gets for e.
func (e Entry) wire(maxBytes int) []byte {
	if e.oversize(maxBytes) {
		return e.Substitute
	}
	return e.Body
}
