package broker

// answerer sends one stream's answers in order, each once the data dir's
// records logged before it was queued are on disk. The stream's handler
// queues an answer and reads the next request at once, whose records then
// share the next fsync (group commit within a stream): a handler that
// waited for the disk before reading on would cost one fsync per request
// (issue 25 item 7: results stored one at a time on one events store stream
// made a data dir broker 6 times slower than memory). Without a data dir it
// sends at once, from the caller's goroutine.
type answerer struct {
	p    *persister
	ch   chan answer
	done chan struct{}
}

// answer is one answer to send once record n is on disk; send's err says
// that the data dir failed instead.
type answer struct {
	n    uint64
	send func(err error)
}

// answersPerStream bounds the answers a stream may have waiting for the
// disk; past it the handler waits before reading the next request.
const answersPerStream = 256

func newAnswerer(p *persister) *answerer {
	a := &answerer{p: p}
	if p != nil {
		a.ch = make(chan answer, answersPerStream)
		a.done = make(chan struct{})
		go a.run()
	}
	return a
}

func (a *answerer) run() {
	defer close(a.done)
	for ans := range a.ch {
		ans.send(a.p.await(ans.n))
	}
}

// answer has send called, in order, once what was logged so far is on disk.
func (a *answerer) answer(send func(err error)) {
	if a.p == nil {
		send(nil)
		return
	}
	a.answerAt(a.p.mark(), send)
}

// answerAt has send called, in order, once the records up to n are on disk.
func (a *answerer) answerAt(n uint64, send func(err error)) {
	if a.p == nil {
		send(nil)
		return
	}
	a.ch <- answer{n: n, send: send}
}

// close sends the answers queued and returns when they are sent. The
// answerer takes no more.
func (a *answerer) close() {
	if a.p != nil {
		close(a.ch)
		<-a.done
	}
}
