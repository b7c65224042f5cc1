package broker

import (
	"container/heap"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/kubemq-io/protobuf/go"
	"golang.org/x/sync/semaphore"
)

// Limits of KubeMQ's default queue configuration, enforced the same way.
const (
	maxPollItems          = 200000 // a poll asking for 0 (or more) gets up to this
	maxReceiveMessages    = 1024   // legacy receive MaxNumberOfMessages
	maxWaitSeconds        = 3600   // legacy receive and ack-all WaitTimeSeconds
	maxExpirationSeconds  = 43200
	maxDelaySeconds       = 43200
	defaultWaitSeconds    = 1 // legacy WaitTimeSeconds 0
	pendingPollsPerStream = 32
)

// Errors the clients see, worded like KubeMQ's so that client code that
// matches on them works against both.
var (
	errInvalidClientID   = errors.New("Error 101: invalid clientID value, cannot be empty")
	errMessageEmpty      = errors.New("Error 110: invalid message, cannot be empty")
	errInvalidQueueName  = errors.New("Error 120: invalid queue name value, cannot be empty, contains wildcards ,white spaces and end with dot")
	errInvalidMaxMsgs    = errors.New("Error 122: max messages should be between 1 and max message setting in kubemq config  ")
	errInvalidQueueMsg   = errors.New("Error 131: invalid queue message")
	errInvalidExpiration = errors.New("Error 133: invalid expiration seconds, exceed max expiration seconds setting in kubemq config")
	errInvalidMaxRecv    = errors.New("Error 134: invalid max received count, cannot be negative or exceed max receive count setting in kubemq config")
	errInvalidDelay      = errors.New("Error 135: invalid delay seconds, exceed max delay seconds setting in kubemq config")
	errInvalidWait       = errors.New("Error 136: invalid wait timeout, value cannot be negative or exceed max wait timeout seconds setting in kubemq config")
	errTxnNotFound       = errors.New("transaction is completed or transaction id not found")
	errRequestUnknown    = errors.New("request unknown")

	// ErrNegativeMaxItems answers a poll with a negative MaxItems (KubeMQ
	// reads it as "all"; kubemq-go never sends one).
	ErrNegativeMaxItems = errors.New("broker: max items cannot be negative")
	// ErrTooManyPolls answers a poll sent while the same stream already has
	// many polls waiting.
	ErrTooManyPolls = errors.New("broker: too many polls pending on this stream")
)

// validQueueName applies KubeMQ's queue name rules, and refuses control
// characters, which the real broker takes and is damaged by (doc.go).
func validQueueName(name string) bool {
	return name != "" && !strings.HasSuffix(name, ".") && !strings.ContainsAny(name, " *>") && !hasControl(name)
}

// hasControl reports whether s holds an ASCII control character.
func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return true
		}
	}
	return false
}

// idGen makes unique ids: a random per-store prefix and a counter.
type idGen struct {
	prefix string
	n      atomic.Uint64
}

func newIDGen() *idGen {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &idGen{prefix: hex.EncodeToString(b[:])}
}

func (g *idGen) next() string {
	var buf [40]byte
	out := append(buf[:0], g.prefix...)
	out = strconv.AppendUint(out, g.n.Add(1), 36)
	return string(out)
}

// queueStore holds every queue channel. Each channel has its own mutex;
// the store's mutex only guards the map of channels.
type queueStore struct {
	opts    *Options
	ids     *idGen
	persist *persister // nil without a data dir; set before serving

	ctx    context.Context // cancelled by close: every wait ends
	cancel context.CancelFunc

	mu     sync.RWMutex
	queues map[string]*queue
	closed bool
}

func newQueueStore(opts *Options) *queueStore {
	ctx, cancel := context.WithCancel(context.Background())
	return &queueStore{opts: opts, ids: newIDGen(), ctx: ctx, cancel: cancel, queues: map[string]*queue{}}
}

// close ends every wait and stops the delay timers. Queues stay readable.
func (st *queueStore) close() {
	st.cancel()
	st.mu.Lock()
	st.closed = true
	qs := make([]*queue, 0, len(st.queues))
	for _, q := range st.queues {
		qs = append(qs, q)
	}
	st.mu.Unlock()
	for _, q := range qs {
		q.mu.Lock()
		if q.timer != nil {
			q.timer.Stop()
			q.timer = nil
		}
		q.mu.Unlock()
	}
}

// queue returns the channel called name, creating it.
func (st *queueStore) queue(name string) *queue {
	st.mu.RLock()
	q := st.queues[name]
	st.mu.RUnlock()
	if q != nil {
		return q
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if q = st.queues[name]; q == nil {
		q = &queue{name: name, st: st, receiver: semaphore.NewWeighted(receiverSlots)}
		st.queues[name] = q
	}
	return q
}

// lookup returns the channel called name or nil.
func (st *queueStore) lookup(name string) *queue {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return st.queues[name]
}

func (st *queueStore) isClosed() bool {
	return st.ctx.Err() != nil
}

// pollWait turns a poll's WaitTimeout (ms) into a wait, raised to the floor.
func (st *queueStore) pollWait(ms int32) time.Duration {
	return max(time.Duration(ms)*time.Millisecond, st.opts.PollWaitFloor)
}

// secondsWait turns a legacy WaitTimeSeconds into a wait, raised to the floor.
func (st *queueStore) secondsWait(sec int32) time.Duration {
	return max(time.Duration(sec)*st.opts.SecondLength, st.opts.PollWaitFloor)
}

// prepare checks a message sent by a client and sets its attributes and
// policy the way KubeMQ does. The store takes ownership of m.
func (st *queueStore) prepare(m *pb.QueueMessage, now int64) *pb.SendQueueMessageResult {
	if m == nil {
		return &pb.SendQueueMessageResult{IsError: true, Error: errInvalidQueueMsg.Error()}
	}
	if m.MessageID == "" {
		m.MessageID = st.ids.next()
	}
	res := &pb.SendQueueMessageResult{MessageID: m.MessageID}
	if err := st.check(m); err != nil {
		res.IsError, res.Error = true, err.Error()
		return res
	}
	p := m.Policy
	if p.MaxReceiveCount == 0 {
		p.MaxReceiveCount = int32(st.opts.DefaultMaxReceiveCount)
	}
	sec := int64(st.opts.SecondLength)
	m.Attributes = &pb.QueueMessageAttributes{}
	if p.ExpirationSeconds > 0 {
		m.Attributes.ExpirationAt = now + int64(p.ExpirationSeconds+p.DelaySeconds)*sec
	}
	if p.DelaySeconds > 0 {
		m.Attributes.DelayedTo = now + int64(p.DelaySeconds)*sec
	}
	res.SentAt = now
	res.ExpirationAt = m.Attributes.ExpirationAt
	res.DelayedTo = m.Attributes.DelayedTo
	return res
}

func (st *queueStore) check(m *pb.QueueMessage) error {
	if m.ClientID == "" {
		return errInvalidClientID
	}
	if !validQueueName(m.Channel) {
		return errInvalidQueueName
	}
	if m.Metadata == "" && len(m.Body) == 0 {
		return errMessageEmpty
	}
	if m.Policy == nil {
		m.Policy = &pb.QueueMessagePolicy{}
	}
	p := m.Policy
	switch {
	case p.ExpirationSeconds < 0 || p.ExpirationSeconds > maxExpirationSeconds:
		return errInvalidExpiration
	case p.MaxReceiveCount < 0 || int(p.MaxReceiveCount) > st.opts.DefaultMaxReceiveCount:
		return errInvalidMaxRecv
	case p.DelaySeconds < 0 || p.DelaySeconds > maxDelaySeconds:
		return errInvalidDelay
	case p.MaxReceiveQueue != "" && !validQueueName(p.MaxReceiveQueue):
		return errInvalidQueueName
	}
	return nil
}

// send stores msgs (already prepared; nil entries are skipped), locking
// each channel once per run of messages to it.
func (st *queueStore) send(msgs []*pb.QueueMessage, now int64) {
	for i := 0; i < len(msgs); {
		if msgs[i] == nil {
			i++
			continue
		}
		j := i + 1
		for j < len(msgs) && (msgs[j] == nil || msgs[j].Channel == msgs[i].Channel) {
			j++
		}
		st.queue(msgs[i].Channel).put(msgs[i:j], now)
		i = j
	}
}

// sendBatch prepares and stores msgs and returns one result per message;
// with a data dir it returns once they are on disk.
func (st *queueStore) sendBatch(msgs []*pb.QueueMessage) ([]*pb.SendQueueMessageResult, bool) {
	s := st.admit(msgs)
	s.commit(st.await(s.mark))
	return s.results, s.haveErrors
}

// sending is a batch of sends admitted: checked and, with a data dir,
// logged. Its messages reach their queues when commit is told that they
// are on disk, so that no consumer sees a message a crash takes back, and a
// message the disk refused is nowhere.
type sending struct {
	st         *queueStore
	results    []*pb.SendQueueMessageResult
	ok         []*pb.QueueMessage // the messages admitted, in order
	haveErrors bool
	mark       uint64 // the log's last record once they were logged
}

// admit prepares msgs and logs the valid ones; commit stores them.
func (st *queueStore) admit(msgs []*pb.QueueMessage) *sending {
	now := time.Now().UnixNano()
	s := &sending{st: st, results: make([]*pb.SendQueueMessageResult, len(msgs)), ok: msgs}
	var down error
	if st.persist != nil {
		if err := st.persist.failed(); err != nil {
			down = refused(err)
		}
	}
	for i, m := range msgs {
		r := st.prepare(m, now)
		if !r.IsError && down != nil {
			r.IsError, r.Error = true, down.Error()
		}
		if !r.IsError {
			if err := st.queue(m.Channel).reserve(heldBytes(m), st.opts.MaxQueueBytes); err != nil {
				r.IsError, r.Error = true, err.Error()
			}
		}
		s.results[i] = r
		s.haveErrors = s.haveErrors || r.IsError
	}
	if s.haveErrors {
		s.ok = make([]*pb.QueueMessage, 0, len(msgs))
		for i, m := range msgs {
			if !s.results[i].IsError {
				s.ok = append(s.ok, m)
			}
		}
	}
	if p := st.persist; p != nil && len(s.ok) > 0 {
		for _, m := range s.ok {
			p.putNew(m)
		}
		s.mark = p.mark()
	}
	return s
}

// commit stores the admitted messages, or with err (the data dir failed
// to keep them) refuses them.
func (s *sending) commit(err error) {
	if len(s.ok) == 0 {
		return
	}
	for _, m := range s.ok { // put counts them as held, or they are refused
		s.st.queue(m.Channel).reserved.Add(-heldBytes(m))
	}
	if err == nil {
		s.st.send(s.ok, time.Now().UnixNano())
		return
	}
	msg := refused(err).Error()
	for _, m := range s.ok {
		s.st.persist.forget(m)
	}
	for _, r := range s.results {
		if !r.IsError {
			r.IsError, r.Error = true, msg
		}
	}
	s.haveErrors = true
}

// sync waits until what was logged is on disk (a no-op without a data
// dir). A failed data dir is logged; what was stored goes on from memory.
func (st *queueStore) sync() error {
	if st.persist == nil {
		return nil
	}
	return st.persist.sync()
}

// await waits until the log's records up to n are on disk (a no-op
// without a data dir).
func (st *queueStore) await(n uint64) error {
	if st.persist == nil {
		return nil
	}
	return st.persist.await(n)
}

// restore loads the messages a data dir kept (Open, before serving), in
// their order, each run of one channel's messages at once.
func (st *queueStore) restore(live []*liveMsg, now int64) {
	msgs := make([]*pb.QueueMessage, len(live))
	for i, l := range live {
		msgs[i] = l.m
	}
	st.send(msgs, now)
}

// reroute moves messages between channels after the source channel's lock
// is released (a DLQ may be the channel itself).
func (st *queueStore) reroute(msgs []*pb.QueueMessage) {
	if len(msgs) > 0 {
		st.send(msgs, time.Now().UnixNano())
	}
}

// deadLetter is the copy of m that KubeMQ moves to the policy's
// MaxReceiveQueue: same id, body, metadata and tags, marked re-routed, its
// receive count starting again and its policy cleared.
func deadLetter(m *pb.QueueMessage) *pb.QueueMessage {
	return &pb.QueueMessage{
		MessageID: m.MessageID,
		ClientID:  m.ClientID,
		Channel:   m.Policy.MaxReceiveQueue,
		Metadata:  m.Metadata,
		Body:      m.Body,
		Tags:      m.Tags,
		Attributes: &pb.QueueMessageAttributes{
			ReRouted:          true,
			ReRoutedFromQueue: m.Channel,
			ExpirationAt:      m.Attributes.ExpirationAt,
		},
		Policy: &pb.QueueMessagePolicy{},
	}
}

// cloneMessage deep-copies m, for snapshots and peeks.
func cloneMessage(m *pb.QueueMessage) *pb.QueueMessage {
	c := &pb.QueueMessage{
		MessageID: m.MessageID,
		ClientID:  m.ClientID,
		Channel:   m.Channel,
		Metadata:  m.Metadata,
		Body:      slices.Clone(m.Body),
		Topic:     m.Topic,
	}
	if m.Tags != nil {
		c.Tags = make(map[string]string, len(m.Tags))
		for k, v := range m.Tags {
			c.Tags[k] = v
		}
	}
	if a := m.Attributes; a != nil {
		c.Attributes = &pb.QueueMessageAttributes{
			Timestamp: a.Timestamp, Sequence: a.Sequence, MD5OfBody: a.MD5OfBody,
			ReceiveCount: a.ReceiveCount, ReRouted: a.ReRouted, ReRoutedFromQueue: a.ReRoutedFromQueue,
			ExpirationAt: a.ExpirationAt, DelayedTo: a.DelayedTo,
		}
	}
	if p := m.Policy; p != nil {
		c.Policy = &pb.QueueMessagePolicy{
			ExpirationSeconds: p.ExpirationSeconds, DelaySeconds: p.DelaySeconds,
			MaxReceiveCount: p.MaxReceiveCount, MaxReceiveQueue: p.MaxReceiveQueue,
		}
	}
	return c
}

// queue is one queue channel. Messages wait in ready (delivery order) or,
// while delayed, in delayed; polls hold what they took as in-flight until
// it is settled, and their open transactions strand more (see
// queue_strand.go). mu guards everything; notify wakes waiting polls.
type queue struct {
	name string
	st   *queueStore
	// receiver stands for the real broker's one pooled client per channel
	// that serves its legacy calls (KUBEMQ.md fact 28): a purge
	// (AckAllQueueMessages) holds it for its whole wait, so the channel's
	// legacy peeks and receives wait for the purge to end (the purge
	// "blocks readers"), and a purge waits for those in progress. Unlike
	// the real broker's, peeks and receives do not wait for each other:
	// each takes one of receiverSlots, a purge takes them all.
	receiver *semaphore.Weighted

	mu         sync.Mutex
	ready      ring
	readyBytes int64
	delayed    delayHeap
	timer      *time.Timer
	timerAt    int64
	inflight   int    // held by transactions, stranded ones included
	open       []*txn // transactions with messages held, oldest first
	room       int    // free room of partly settled open transactions
	// shadow counts the messages at the head of ready that the last
	// transaction to close had stranded (see queue_strand.go): the next
	// stream poll is forced to take them all.
	shadow    int
	seq       uint64
	sent      int64
	delivered int64
	waiters   int
	notify    chan struct{} // closed and cleared when messages arrive

	// held is the heldBytes of the messages the queue holds (waiting,
	// delayed, delivered and not settled); reserved those of sends
	// admitted and not yet stored. Options.MaxQueueBytes bounds their sum.
	held, reserved atomic.Int64
}

// receiverSlots is how many legacy peeks and receives of one channel run at
// once (queue.receiver); a purge takes every slot.
const receiverSlots = 1 << 20

// msgOverhead is what a queue message costs the broker beyond its bytes
// (the message, its attributes and policy, the ring's and the log's keys),
// counted by heldBytes so that MaxQueueBytes bounds many small messages too.
const msgOverhead = 256

// heldBytes is m's size against MaxQueueBytes: body, metadata, tags, ids,
// and msgOverhead. None of these change while a queue holds m.
func heldBytes(m *pb.QueueMessage) int64 {
	n := len(m.Body) + len(m.Metadata) + len(m.MessageID) + len(m.ClientID) + msgOverhead
	for k, v := range m.Tags {
		n += len(k) + len(v)
	}
	return int64(n)
}

// reserve counts n bytes of a send admitted against the queue's bound,
// unless they would pass it; sending.commit settles them.
func (q *queue) reserve(n, bound int64) error {
	for {
		r := q.reserved.Load()
		if held := q.held.Load(); bound > 0 && held+r+n > bound {
			return fmt.Errorf("broker: queue %s is full: it holds %d bytes, a message of %d would pass its bound of %d bytes", q.name, held+r, n, bound)
		}
		if q.reserved.CompareAndSwap(r, r+n) {
			return nil
		}
	}
}

func msgBytes(m *pb.QueueMessage) int64 { return int64(len(m.Body) + len(m.Metadata)) }

// put stores prepared messages: due ones at the tail, delayed ones aside.
func (q *queue) put(msgs []*pb.QueueMessage, now int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range msgs {
		q.sent++
		q.held.Add(heldBytes(m))
		if p := q.st.persist; p != nil {
			p.put(m)
		}
		if m.Attributes.DelayedTo > now {
			heap.Push(&q.delayed, m)
			continue
		}
		q.pushLocked(m, now)
	}
	q.armLocked(now)
	q.fillRoomLocked()
	q.wakeLocked()
}

// pushLocked publishes m at the tail: like a KubeMQ publish, it gets the
// channel's next sequence and a new timestamp.
func (q *queue) pushLocked(m *pb.QueueMessage, now int64) {
	q.seq++
	m.Channel = q.name
	m.Attributes.Sequence = q.seq
	m.Attributes.Timestamp = now
	q.ready.pushBack(m)
	q.readyBytes += msgBytes(m)
}

func (q *queue) wakeLocked() {
	if q.notify != nil && q.ready.len() > 0 {
		close(q.notify)
		q.notify = nil
	}
}

// waitChLocked returns the channel closed when messages next arrive.
func (q *queue) waitChLocked() <-chan struct{} {
	if q.notify == nil {
		q.notify = make(chan struct{})
	}
	return q.notify
}

// armLocked points the delay timer at the earliest delayed message.
func (q *queue) armLocked(now int64) {
	if len(q.delayed) == 0 || q.st.isClosed() {
		return
	}
	due := q.delayed[0].Attributes.DelayedTo
	if q.timer != nil && q.timerAt == due {
		return
	}
	d := time.Duration(due - now)
	if q.timer == nil {
		q.timer = time.AfterFunc(d, q.promote)
	} else {
		q.timer.Reset(d)
	}
	q.timerAt = due
}

// promote moves delayed messages that are due to the tail.
func (q *queue) promote() {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now().UnixNano()
	for len(q.delayed) > 0 && q.delayed[0].Attributes.DelayedTo <= now {
		q.pushLocked(heap.Pop(&q.delayed).(*pb.QueueMessage), now)
	}
	q.timerAt = 0
	q.armLocked(now)
	q.fillRoomLocked()
	q.wakeLocked()
}

// popLocked takes up to n deliverable messages from the head into out,
// dropping expired ones (counted) and routing those past their receive
// limit (returned in routed, to be sent once q.mu is released). Each
// message taken has its ReceiveCount raised.
func (q *queue) popLocked(out []*pb.QueueMessage, n int, now int64, routed []*pb.QueueMessage) ([]*pb.QueueMessage, int, []*pb.QueueMessage) {
	expired := 0
	for n > 0 && q.ready.len() > 0 {
		m := q.ready.popFront()
		q.readyBytes -= msgBytes(m)
		q.shadow = max(q.shadow-1, 0)
		if exp := m.Attributes.ExpirationAt; exp > 0 && exp <= now {
			expired++
			q.gone(m)
			continue
		}
		m.Attributes.ReceiveCount++
		if m.Attributes.ReceiveCount > q.maxReceive(m) {
			routed = q.deadLetterLocked(m, routed)
			continue
		}
		if p := q.st.persist; p != nil {
			p.recv(m)
		}
		out = append(out, m)
		n--
	}
	return out, expired, routed
}

// deadLetterLocked retires m, past its receive limit: a copy goes to its
// dead letter queue, when it has one, through routed. The copy is logged
// before m is logged gone, so a crash in between keeps both, not neither.
func (q *queue) deadLetterLocked(m *pb.QueueMessage, routed []*pb.QueueMessage) []*pb.QueueMessage {
	if m.Policy.MaxReceiveQueue != "" {
		c := deadLetter(m)
		if p := q.st.persist; p != nil {
			p.putNew(c)
		}
		routed = append(routed, c)
	}
	q.gone(m)
	return routed
}

// gone counts m out of the queue for good (acked, consumed, expired,
// purged, moved to its dead letter queue), and logs it so with a data dir.
func (q *queue) gone(m *pb.QueueMessage) {
	q.held.Add(-heldBytes(m))
	if p := q.st.persist; p != nil {
		p.gone(m)
	}
}

// goneAll is gone for each of msgs.
func (q *queue) goneAll(msgs []*pb.QueueMessage) {
	for _, m := range msgs {
		q.gone(m)
	}
}

func (q *queue) maxReceive(m *pb.QueueMessage) int32 {
	if m.Policy.MaxReceiveCount > 0 {
		return m.Policy.MaxReceiveCount
	}
	return int32(q.st.opts.DefaultMaxReceiveCount)
}

// take waits up to wait for max messages and returns what it got. With
// hold the messages stay in flight until settled (ack, nack, requeue,
// release); without, they are consumed. When ctx ends first, what was
// taken goes back and take returns ctx's error.
func (q *queue) take(ctx context.Context, max int, wait time.Duration, hold bool) ([]*pb.QueueMessage, int, error) {
	msgs, _, expired, err := q.takeForced(ctx, max, wait, hold, false)
	return msgs, expired, err
}

// takeForced is take; with forced (a stream poll that holds what it
// takes), what the shadow holds beyond max comes back as strays, taken
// from the queue with the messages: the caller's transaction holds them,
// unseen (queue_strand.go, KUBEMQ.md fact 45).
func (q *queue) takeForced(ctx context.Context, max int, wait time.Duration, hold, forced bool) (msgs, strays []*pb.QueueMessage, expired int, err error) {
	var (
		routed []*pb.QueueMessage
		timer  *time.Timer
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		n := 0
		now := time.Now().UnixNano()
		q.mu.Lock()
		if msgs == nil && q.ready.len() > 0 {
			msgs = make([]*pb.QueueMessage, 0, min(max, q.ready.len()))
		}
		before := len(msgs)
		msgs, n, routed = q.popLocked(msgs, max-len(msgs), now, routed[:0])
		expired += n
		if forced && len(msgs) > 0 && q.shadow > 0 {
			strays = q.popRawLocked(q.shadow)
		}
		got := len(msgs) - before
		q.delivered += int64(got)
		if hold {
			q.inflight += got
		}
		var ch <-chan struct{}
		if len(msgs) < max {
			ch = q.waitChLocked()
			q.waiters++
		}
		q.mu.Unlock()
		q.st.reroute(routed)
		if ch == nil {
			msgs, expired, err = q.taken(msgs, expired, hold)
			return msgs, strays, expired, err
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		}
		done, err := q.await(ctx, ch, timer.C)
		if err != nil {
			if hold {
				q.release(msgs)
			} else {
				q.unconsume(msgs)
			}
			q.mu.Lock()
			q.restoreStrandedLocked(strays)
			q.mu.Unlock()
			return nil, nil, expired, err
		}
		if done {
			msgs, expired, err = q.taken(msgs, expired, hold)
			return msgs, strays, expired, err
		}
	}
}

// taken ends a successful take: consumed messages (without hold) are gone
// for good, on disk too before the caller answers, as an ack is.
func (q *queue) taken(msgs []*pb.QueueMessage, expired int, hold bool) ([]*pb.QueueMessage, int, error) {
	if !hold && len(msgs) > 0 {
		q.goneAll(msgs)
		_ = q.st.sync() // a failed data dir is logged; the messages are delivered
	}
	return msgs, expired, nil
}

// await waits for the queue to change (ch, taken with waitChLocked and a
// waiters++ under q.mu), for expire, for ctx or for the server to close,
// and undoes the caller's waiters++. timedOut reports expire.
func (q *queue) await(ctx context.Context, ch <-chan struct{}, expire <-chan time.Time) (timedOut bool, err error) {
	select {
	case <-ch:
	case <-expire:
		timedOut = true
	case <-ctx.Done():
		err = ctx.Err()
	case <-q.st.ctx.Done():
		err = ErrClosed
	}
	q.mu.Lock()
	q.waiters--
	q.mu.Unlock()
	return timedOut, err
}

// peek waits up to wait for max messages and returns copies of the ones at
// the head without taking them; the copies show the receive count a
// delivery would give. Expired messages met on the way are dropped. What
// it saw strands in an open transaction of the queue, as on KubeMQ (see
// strandPeekedLocked).
func (q *queue) peek(ctx context.Context, max int, wait time.Duration) ([]*pb.QueueMessage, int, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	expired := 0
	for {
		now := time.Now().UnixNano()
		q.mu.Lock()
		var out []*pb.QueueMessage
		for i := 0; i < q.ready.len() && len(out) < max; {
			m := q.ready.at(i)
			if exp := m.Attributes.ExpirationAt; exp > 0 && exp <= now {
				q.ready.removeAt(i)
				q.readyBytes -= msgBytes(m)
				q.gone(m)
				expired++
				continue
			}
			c := cloneMessage(m)
			c.Attributes.ReceiveCount++
			out = append(out, c)
			i++
		}
		full := len(out) >= max
		var ch <-chan struct{}
		if full {
			q.strandPeekedLocked(len(out))
		} else {
			ch = q.waitChLocked()
			q.waiters++
		}
		q.mu.Unlock()
		if full {
			return out, expired, nil
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		}
		done, err := q.await(ctx, ch, timer.C)
		if err != nil {
			return nil, expired, err
		}
		if done {
			q.mu.Lock()
			q.strandPeekedLocked(len(out))
			q.mu.Unlock()
			return out, expired, nil
		}
	}
}

// purge removes every ready message, again whenever more arrive, until
// wait passes; it returns how many it removed (KubeMQ's ack-all).
func (q *queue) purge(ctx context.Context, wait time.Duration) (uint64, error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var n uint64
	for {
		q.mu.Lock()
		n += uint64(q.ready.len())
		for i := range q.ready.len() {
			q.gone(q.ready.at(i))
		}
		q.ready.clear()
		q.readyBytes, q.shadow = 0, 0
		ch := q.waitChLocked()
		q.mu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
			return n, q.st.sync()
		case <-ctx.Done():
			return n, ctx.Err()
		case <-q.st.ctx.Done():
			return n, ErrClosed
		}
	}
}

// ack settles held messages as done. With a data dir the caller answers
// once that is on disk (queueStore.sync or an answerer); a failed data dir
// is logged, and the ack stands in memory.
func (q *queue) ack(msgs []*pb.QueueMessage) {
	q.mu.Lock()
	q.inflight -= len(msgs)
	q.goneAll(msgs)
	q.mu.Unlock()
}

// nack settles held messages as failed: each goes back to the tail as a
// new publish, or, when this was its last allowed receive, to its dead
// letter queue or nowhere. With a data dir the caller answers once that is
// on disk, as for ack.
func (q *queue) nack(msgs []*pb.QueueMessage) {
	var routed []*pb.QueueMessage
	now := time.Now().UnixNano()
	q.mu.Lock()
	q.inflight -= len(msgs)
	for _, m := range msgs {
		if m.Attributes.ReceiveCount >= q.maxReceive(m) {
			routed = q.deadLetterLocked(m, routed)
			continue
		}
		q.pushLocked(m, now)
		if p := q.st.persist; p != nil {
			p.tail(m)
		}
	}
	q.wakeLocked()
	q.mu.Unlock()
	q.st.reroute(routed)
}

// release puts held messages back at the head, in order, as if they had
// never been delivered: a disconnect is not a receive.
func (q *queue) release(msgs []*pb.QueueMessage) {
	if len(msgs) == 0 {
		return
	}
	q.mu.Lock()
	q.inflight -= len(msgs)
	q.delivered -= int64(len(msgs))
	q.restoreLocked(msgs)
	q.mu.Unlock()
}

// unconsume puts back messages a consuming take got before its ctx ended.
func (q *queue) unconsume(msgs []*pb.QueueMessage) {
	if len(msgs) == 0 {
		return
	}
	q.mu.Lock()
	q.delivered -= int64(len(msgs))
	q.restoreLocked(msgs)
	q.mu.Unlock()
}

func (q *queue) restoreLocked(msgs []*pb.QueueMessage) {
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		m.Attributes.ReceiveCount--
		if p := q.st.persist; p != nil {
			p.recv(m)
		}
		q.ready.pushFront(m)
		q.readyBytes += msgBytes(m)
	}
	if len(msgs) > 0 {
		q.shadow = 0 // no longer at the head: not modelled further
	}
	q.wakeLocked()
}

// requeue settles held messages by sending copies to channel, as new
// messages with the same id (KubeMQ re-sends them through its send path).
// With a data dir the caller answers once that is on disk, as for ack.
func (st *queueStore) requeue(q *queue, msgs []*pb.QueueMessage, channel string) error {
	now := time.Now().UnixNano()
	copies := make([]*pb.QueueMessage, 0, len(msgs))
	for _, m := range msgs {
		c := &pb.QueueMessage{
			MessageID: m.MessageID, ClientID: m.ClientID, Channel: channel,
			Metadata: m.Metadata, Body: m.Body, Tags: m.Tags,
			Policy: &pb.QueueMessagePolicy{
				ExpirationSeconds: m.Policy.ExpirationSeconds, DelaySeconds: m.Policy.DelaySeconds,
				MaxReceiveCount: m.Policy.MaxReceiveCount, MaxReceiveQueue: m.Policy.MaxReceiveQueue,
			},
		}
		if res := st.prepare(c, now); res.IsError {
			return fmt.Errorf("re-queue message with seq %d failed, %s", m.Attributes.Sequence, res.Error)
		}
		copies = append(copies, c)
	}
	// The copies are stored before the messages are settled, so that a
	// crash in between (with a data dir) keeps both, not neither.
	st.send(copies, now)
	q.ack(msgs)
	return nil
}
