package task

// The records of a compat channel (<prefix><task_id>, the Python adapter's
// per-task result channel) have several writers: the producer writes
// PENDING before it enqueues and CANCELLED when it cancels (a purge, then
// the record: KUBEMQ.md trap 24), and a worker writes the task's terminal
// record. Readers see the channel's oldest record. A worker that has sent
// its record therefore asks what each older record ahead of it is (Stand),
// and removes it only when it is Superseded: a producer's record written
// after the task started is never removed, whatever the timing.

// TagWriter marks a record written by an inferq worker to a compat
// channel; its value is WriterInferq. Producers' records do not carry it.
// TagWrite names the write that sent the record (a random id): a worker
// sends its record first and then removes the older records ahead of it,
// stopping at its own.
const (
	TagWriter    = "inferq-writer"
	WriterInferq = "inferq"
	TagWrite     = "inferq-write"
)

// Standing is what a compat channel's oldest record is to a worker about
// to write the task's terminal record there.
type Standing int

const (
	// Superseded: a record the new one replaces: one an inferq worker
	// wrote (an earlier delivery's), or a non-terminal one (the
	// producer's PENDING). Remove it.
	Superseded Standing = iota
	// Final: a terminal record another writer put there, such as the
	// producer's CANCELLED. It stands: the worker removes nothing more,
	// and its own record behind it is never read.
	Final
	// Foreign: a message that is no record. The worker leaves it, and
	// its own record behind it, losing nothing.
	Foreign
)

// String names s for logs.
func (s Standing) String() string {
	switch s {
	case Superseded:
		return "superseded"
	case Final:
		return "final"
	case Foreign:
		return "foreign"
	}
	return "unknown"
}

// Stand says what the message with these tags and body, the oldest of a
// compat channel, is to a worker about to write there. A message tagged
// TagWriter is inferq's without reading the body; an untagged record with
// a "worker" field is one an inferq written before the tag existed.
func Stand(tags map[string]string, body []byte) Standing {
	if tags[TagWriter] == WriterInferq {
		return Superseded
	}
	r, err := ParseRecord(body)
	switch {
	case err != nil || !r.Status.Valid():
		return Foreign
	case r.Worker != "" || !r.Status.Terminal():
		return Superseded
	default:
		return Final
	}
}
