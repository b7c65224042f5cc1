package batch

// The gathering state of a Batcher (shape groups, their queues and the
// batches cut from them, owned by the goroutine of Batcher.Run) and the
// workers that run the batches cut: a request's path through the batcher is
// Enqueue, gather, dispatch, runBatch, all in this file, then the Runner
// (runtime.Session.RunBatch, for one).

import (
	"context"
	"fmt"
	"time"
)

// Enqueue hands r to the batcher, waiting for room in the queue while it is
// full (backpressure). It returns nil once the request is accepted; then
// r.Owner.Finished will be called exactly once. Otherwise it returns ctx's
// error (ctx ended first, or had already ended), an error wrapping
// ErrClosed (Close was called or Run returned), or an error for a request
// without Owner; the owner then hears nothing.
//
// ctx also governs the item: if it ends before the item's run starts, the
// item is not run and its result is ctx's error. A run already started is not
// interrupted.
func (b *Batcher) Enqueue(ctx context.Context, r *Request) error {
	return b.enqueue(ctx, r, true)
}

// TryEnqueue is Enqueue without the wait: it returns ErrQueueFull at once
// when the queue is full.
func (b *Batcher) TryEnqueue(ctx context.Context, r *Request) error {
	return b.enqueue(ctx, r, false)
}

func (b *Batcher) enqueue(ctx context.Context, r *Request, wait bool) error {
	if r == nil || r.Owner == nil {
		return fmt.Errorf("batch: batcher %q: request without Owner", b.name)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return b.errClosed
	}
	select {
	case b.tokens <- struct{}{}:
	default:
		if !wait {
			return ErrQueueFull
		}
		select {
		case b.tokens <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		case <-b.closing:
			return b.errClosed
		}
	}
	r.ctx = ctx
	r.rows = itemRows(&r.Item)
	if r.Alone {
		// Counting a full batch of rows makes it run in a batch of its own.
		r.rows = max(r.rows, b.policy.MaxBatchSize)
	}
	r.Enqueued = time.Now()
	r.seq = b.seq.Add(1)
	r.lane = b.lane(r)
	if r.Priority {
		b.prio <- r
	} else {
		b.normal <- r
	}
	return nil
}

// lane is r's lane: two per level, the Priority one first.
func (b *Batcher) lane(r *Request) int {
	levels := max(b.policy.PriorityLevels, 1)
	l := r.Level
	if l < 1 || l > levels {
		l = levels
	}
	lane := 2 * (l - 1)
	if !r.Priority {
		lane++
	}
	return lane
}

// batch is one run's requests, cut from one shape group; gone are
// requests of the group whose context had ended, to be answered by the
// worker. Batches are recycled: there are at most as many as run slots.
type batch struct {
	reqs   []*Request
	items  []Item
	gone   []*Request
	runner int
	// rows and took are the run's, set by the worker (rows 0: nothing ran).
	rows int
	took time.Duration
}

// gatherer is the state owned by Run's goroutine.
type gatherer struct {
	b         *Batcher
	max       int
	delay     time.Duration
	preferred []int

	lanes   int
	aging   time.Duration
	groups  map[uint64]*shapeGroup // by shape hash; collisions chained
	active  []*shapeGroup          // groups holding requests
	spare   []*shapeGroup
	pending int // requests held in groups

	work     []chan *batch // per runner, room for Concurrency
	freed    chan *batch   // batches back from workers, room for every slot
	busy     []int         // runs in flight per runner
	idle     int           // free run slots
	next     int           // runner to try first, for spreading ties
	batches  []*batch      // spare batches
	timer    *time.Timer
	timerSet bool
	timerAt  time.Time

	cost      runCost // the last runs, and their fixed cost (cost.go)
	costAbove bool    // the fixed cost was found above the delay (logged once)
}

func newGatherer(b *Batcher) *gatherer {
	slots := len(b.runners) * b.conc
	g := &gatherer{
		b:         b,
		max:       b.policy.MaxBatchSize,
		delay:     b.policy.MaxQueueDelay,
		preferred: b.policy.PreferredBatchSizes,
		lanes:     b.policy.lanes(),
		aging:     b.policy.PriorityAging,
		groups:    make(map[uint64]*shapeGroup),
		work:      make([]chan *batch, len(b.runners)),
		freed:     make(chan *batch, slots),
		busy:      make([]int, len(b.runners)),
		idle:      slots,
		timer:     time.NewTimer(time.Hour),
	}
	g.timer.Stop()
	for i := range g.work {
		g.work[i] = make(chan *batch, b.conc)
	}
	for range slots {
		g.batches = append(g.batches, &batch{reqs: make([]*Request, 0, min(g.max, 64))})
	}
	return g
}

// gather is the main loop: take requests, run what is ready, until ctx
// ends or Close.
func (g *gatherer) gather(ctx context.Context) {
	b := g.b
	for {
		g.dispatch(false)
		g.arm()
		select {
		case r := <-b.prio:
			g.add(r)
		case r := <-b.normal:
			g.add(r)
		case bt := <-g.freed:
			g.release(bt)
		case <-g.timer.C:
			g.timerSet = false
		case <-b.flush:
		case <-ctx.Done():
			return
		case <-b.closing:
			return
		}
		// Take whatever else is there before deciding: batches fill,
		// priority requests are seen, and a preferred size is only taken
		// when nothing else is immediately available.
		g.drain()
	}
}

// drain takes every request and finished batch immediately available,
// priority requests first.
func (g *gatherer) drain() {
	b := g.b
	for {
		select {
		case bt := <-g.freed:
			g.release(bt)
			continue
		default:
		}
		select {
		case r := <-b.prio:
			g.add(r)
			continue
		default:
		}
		select {
		case r := <-b.normal:
			g.add(r)
		default:
			return
		}
	}
}

func (g *gatherer) release(bt *batch) {
	g.busy[bt.runner]--
	g.idle++
	g.batches = append(g.batches, bt)
	if bt.rows > 0 {
		g.cost.observe(bt.rows, bt.took)
		g.b.fixedCost.Store(int64(g.cost.fixed))
		if !g.costAbove && g.cost.fixed > g.delay {
			g.costAbove = true
			g.b.logger.Info("a run's fixed cost is above max_queue_delay: under load, a queue poll's fragment of a burst waits out max_queue_delay for the rest instead of running alone; on an accelerator a max_queue_delay of a few ms lets bursts fill batches",
				"batcher", g.b.name, "fixed_cost", g.cost.fixed, "max_queue_delay", g.delay, "rows_per_run", g.cost.mean)
		}
	}
}

// add files r in its shape group.
func (g *gatherer) add(r *Request) {
	h := shapeHash(&r.Item)
	first := g.groups[h]
	sg := first
	for sg != nil && !sameShape(&sg.head().Item, &r.Item) {
		sg = sg.next
	}
	if sg == nil {
		if n := len(g.spare); n > 0 {
			sg = g.spare[n-1]
			g.spare = g.spare[:n-1]
		} else {
			sg = &shapeGroup{lanes: make([]reqQueue, g.lanes)}
		}
		sg.hash, sg.next = h, first
		g.groups[h] = sg
		sg.index = len(g.active)
		g.active = append(g.active, sg)
	}
	sg.lanes[r.lane].push(r)
	if r.Priority {
		sg.sync++
	}
	sg.n++
	sg.rows += r.rows
	g.pending++
}

// remove drops an emptied group.
func (g *gatherer) remove(sg *shapeGroup) {
	last := g.active[len(g.active)-1]
	g.active[sg.index] = last
	last.index = sg.index
	g.active = g.active[:len(g.active)-1]
	if g.groups[sg.hash] == sg {
		if sg.next != nil {
			g.groups[sg.hash] = sg.next
		} else {
			delete(g.groups, sg.hash)
		}
	} else {
		for p := g.groups[sg.hash]; p != nil; p = p.next {
			if p.next == sg {
				p.next = sg.next
				break
			}
		}
	}
	*sg = shapeGroup{lanes: sg.lanes}
	if len(g.spare) < 64 {
		g.spare = append(g.spare, sg)
	}
}

// dispatch cuts and sends batches while a run slot is free and a group is
// ready. stopping makes every group ready.
func (g *gatherer) dispatch(stopping bool) {
	var now time.Time
	for g.idle > 0 && len(g.active) > 0 {
		if now.IsZero() && !stopping {
			now = time.Now()
		}
		if now.IsZero() {
			now = time.Now() // stopping: lanes still order the flush
		}
		var best *shapeGroup
		var bestLimit int
		var bestKey laneKey
		for _, sg := range g.active {
			limit := g.readyLimit(sg, now, stopping)
			if limit == 0 {
				continue
			}
			_, key := g.first(sg, now)
			if best == nil || key.before(bestKey) {
				best, bestLimit, bestKey = sg, limit, key
			}
		}
		if best == nil {
			return
		}
		g.send(g.cut(best, bestLimit, now))
		if best.n == 0 {
			g.remove(best)
		}
	}
}

// readyLimit returns the rows to cut from sg now, or 0 if it should wait.
func (g *gatherer) readyLimit(sg *shapeGroup, now time.Time, stopping bool) int {
	// A priority request (a caller waiting: a query, an HTTP infer) does
	// not wait out the delay: its group runs at the first free slot. Under
	// load slots are busy, so its batch still fills meanwhile.
	if stopping || sg.rows >= g.max || sg.sync > 0 || !now.Before(sg.oldest().Add(g.delay)) || sg.flushed(g.b.flushed.Load()) && !g.cost.fragment(sg.rows, g.delay) {
		return g.max
	}
	if len(g.preferred) == 0 {
		return 0
	}
	// The largest preferred size that a prefix of the group adds up to.
	best, sum, pi := 0, 0, 0
	for i := range sg.lanes {
		q := &sg.lanes[i]
		for _, r := range q.buf[q.head:] {
			sum += r.rows
			if sum > g.max {
				return best
			}
			for pi < len(g.preferred) && g.preferred[pi] < sum {
				pi++
			}
			if pi == len(g.preferred) {
				return best
			}
			if g.preferred[pi] == sum {
				best = sum
			}
		}
	}
	return best
}

// laneKey orders requests: the lower (aged) lane first, then the older.
type laneKey struct {
	lane int
	at   time.Time
}

func (k laneKey) before(o laneKey) bool {
	return k.lane < o.lane || k.lane == o.lane && k.at.Before(o.at)
}

// key is r's place in line at now: its lane, lowered by one for every
// PriorityAging it has waited.
func (g *gatherer) key(r *Request, now time.Time) laneKey {
	lane := r.lane
	if g.aging > 0 && lane > 0 {
		lane = max(0, lane-int(now.Sub(r.Enqueued)/g.aging))
	}
	return laneKey{lane, r.Enqueued}
}

// first returns the lane of sg whose head goes first at now, and its key;
// sg holds a request. Each lane is in Enqueue order, so its head ages
// most: the heads are all that need comparing.
func (g *gatherer) first(sg *shapeGroup, now time.Time) (*reqQueue, laneKey) {
	var best *reqQueue
	var bestKey laneKey
	for i := range sg.lanes {
		q := &sg.lanes[i]
		r := q.peek()
		if r == nil {
			continue
		}
		if k := g.key(r, now); best == nil || k.before(bestKey) {
			best, bestKey = q, k
		}
	}
	return best, bestKey
}

// cut takes up to limit rows from sg in lane order (see first); a head
// item bigger than limit goes alone. Requests whose context has ended go
// in the batch's gone list and count for nothing.
func (g *gatherer) cut(sg *shapeGroup, limit int, now time.Time) *batch {
	n := len(g.batches)
	bt := g.batches[n-1]
	g.batches = g.batches[:n-1]
	rows := 0
	for rows < limit && sg.n > 0 {
		q, _ := g.first(sg, now)
		r := q.peek()
		if r.ctx.Err() == nil {
			if len(bt.reqs) > 0 && rows+r.rows > limit {
				break
			}
			bt.reqs = append(bt.reqs, r)
			rows += r.rows
		} else {
			bt.gone = append(bt.gone, r)
		}
		q.pop()
		sg.n--
		if r.Priority {
			sg.sync--
		}
		sg.rows -= r.rows
		g.pending--
		<-g.b.tokens
	}
	return bt
}

// send hands bt to the runner with the fewest runs in flight.
func (g *gatherer) send(bt *batch) {
	n := len(g.busy)
	best := -1
	for k := range n {
		i := (g.next + k) % n
		if g.busy[i] < g.b.conc && (best < 0 || g.busy[i] < g.busy[best]) {
			best = i
		}
	}
	g.next = (best + 1) % n
	g.busy[best]++
	g.idle--
	bt.runner = best
	g.work[best] <- bt
}

// arm sets the timer for the earliest MaxQueueDelay to come, when a run
// slot is free to take it.
func (g *gatherer) arm() {
	if g.idle == 0 || len(g.active) == 0 {
		if g.timerSet {
			g.timer.Stop()
			g.timerSet = false
		}
		return
	}
	var at time.Time
	for i, sg := range g.active {
		if t := sg.oldest(); i == 0 || t.Before(at) {
			at = t
		}
	}
	at = at.Add(g.delay)
	if g.timerSet && at.Equal(g.timerAt) {
		return
	}
	g.timer.Reset(time.Until(at))
	g.timerSet, g.timerAt = true, at
}

// shapeGroup holds the pending requests of one per-item shape, by lane
// (Batcher.lane).
type shapeGroup struct {
	hash  uint64
	next  *shapeGroup
	index int // in gatherer.active
	lanes []reqQueue
	n     int // requests held
	sync  int // of them Priority
	rows  int
}

// head returns a request of the group, whose item stands for its shape;
// groups are dropped when they empty, so there is one.
func (sg *shapeGroup) head() *Request {
	for i := range sg.lanes {
		if r := sg.lanes[i].peek(); r != nil {
			return r
		}
	}
	return nil
}

// flushed reports whether the group holds a request enqueued before the
// Flush that saw sequence number upTo: a lane's head is its first.
func (sg *shapeGroup) flushed(upTo uint64) bool {
	for i := range sg.lanes {
		if r := sg.lanes[i].peek(); r != nil && r.seq <= upTo {
			return true
		}
	}
	return false
}

// oldest returns the earliest Enqueued of the group's head requests.
func (sg *shapeGroup) oldest() time.Time {
	var at time.Time
	for i := range sg.lanes {
		if r := sg.lanes[i].peek(); r != nil && (at.IsZero() || r.Enqueued.Before(at)) {
			at = r.Enqueued
		}
	}
	return at
}

// reqQueue is a FIFO of requests that reuses its buffer.
type reqQueue struct {
	buf  []*Request
	head int
}

func (q *reqQueue) push(r *Request) {
	if q.head > 0 && len(q.buf) == cap(q.buf) {
		n := copy(q.buf, q.buf[q.head:])
		clear(q.buf[n:])
		q.buf, q.head = q.buf[:n], 0
	}
	q.buf = append(q.buf, r)
}

func (q *reqQueue) peek() *Request {
	if q.head == len(q.buf) {
		return nil
	}
	return q.buf[q.head]
}

func (q *reqQueue) pop() {
	q.buf[q.head] = nil
	q.head++
	if q.head == len(q.buf) {
		q.buf, q.head = q.buf[:0], 0
	}
}

// itemRows is the item's row count against MaxBatchSize: dim 0 of its
// first input, at least 1 (an item the model refuses still takes a place).
func itemRows(it *Item) int {
	if len(it.Inputs) == 0 || len(it.Inputs[0].Shape) == 0 || it.Inputs[0].Shape[0] < 1 {
		return 1
	}
	return int(it.Inputs[0].Shape[0])
}

// shapeHash hashes what decides whether items can share a run: per input,
// its name, datatype, rank and dims but dim 0 (FNV-1a).
func shapeHash(it *Item) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	for i := range it.Inputs {
		t := &it.Inputs[i]
		for j := 0; j < len(t.Name); j++ {
			h = (h ^ uint64(t.Name[j])) * prime
		}
		h = (h ^ uint64(t.DType)) * prime
		h = (h ^ uint64(len(t.Shape))) * prime
		for j := 1; j < len(t.Shape); j++ {
			h = (h ^ uint64(t.Shape[j])) * prime
		}
	}
	return h
}

func sameShape(a, b *Item) bool {
	if len(a.Inputs) != len(b.Inputs) {
		return false
	}
	for i := range a.Inputs {
		s, t := &a.Inputs[i], &b.Inputs[i]
		if s.Name != t.Name || s.DType != t.DType || len(s.Shape) != len(t.Shape) {
			return false
		}
		for j := 1; j < len(s.Shape); j++ {
			if s.Shape[j] != t.Shape[j] {
				return false
			}
		}
	}
	return true
}

// worker runs the batches sent to runner i, one at a time.
func (b *Batcher) worker(i int, work <-chan *batch, freed chan<- *batch) {
	for bt := range work {
		b.runBatch(i, bt)
		freed <- bt
	}
}

// runBatch runs bt on runner i and finishes every request.
func (b *Batcher) runBatch(i int, bt *batch) {
	for _, r := range bt.gone {
		r.Finish(ItemResult{Err: context.Cause(r.ctx)})
	}
	// A request may have been cancelled since the batch was cut.
	reqs := bt.reqs[:0]
	rows := 0
	for _, r := range bt.reqs {
		if r.ctx.Err() != nil {
			r.Finish(ItemResult{Err: context.Cause(r.ctx)})
			continue
		}
		reqs = append(reqs, r)
		bt.items = append(bt.items, r.Item)
		rows += r.rows
	}
	bt.rows, bt.took = 0, 0
	if len(reqs) > 0 {
		n := int64(len(reqs))
		start := time.Now()
		if b.obs != nil {
			for _, r := range reqs {
				b.obs.ObserveQueueWait(start.Sub(r.Enqueued))
			}
		}
		for _, r := range reqs {
			r.Start(len(reqs))
		}
		b.running.Add(n)
		res := b.runners[i].RunBatch(context.Background(), bt.items)
		elapsed := time.Since(start)
		b.running.Add(-n)
		b.busy.Add(int64(elapsed))
		b.rowsRun.Add(int64(rows))
		bt.rows, bt.took = rows, elapsed
		if b.obs != nil {
			b.obs.ObserveBatch(Stats{Runner: i, Items: len(reqs), Rows: rows, Run: elapsed})
		}
		if len(res) != len(reqs) {
			err := fmt.Errorf("batch: batcher %q: runner %d returned %d results for %d items", b.name, i, len(res), len(reqs))
			b.logger.Error("runner fault", "batcher", b.name, "runner", i, "error", err)
			res = make([]ItemResult, len(reqs))
			for k := range res {
				res[k].Err = err
			}
		}
		for k, r := range reqs {
			r.Finish(res[k])
		}
	}
	clear(bt.reqs)
	clear(bt.items)
	clear(bt.gone)
	bt.reqs, bt.items, bt.gone = bt.reqs[:0], bt.items[:0], bt.gone[:0]
}
