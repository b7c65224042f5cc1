package chaos

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// maxLogLine is the longest log line a scenario accepts: issue 11 item 2
// saw 9.4 MB lines carrying a producer's id.
const maxLogLine = 64 << 10

// server is one `inferq serve` process. Its methods are safe for
// concurrent use.
type server struct {
	cmd  *exec.Cmd
	logs *logTail
	done chan struct{} // closed at exit
	err  error         // the exit, after done

	stopping atomic.Bool  // the harness stopped it on purpose
	hwm      atomic.Int64 // peak RSS in bytes (VmHWM)
	addr     chan string  // the HTTP address, from the log
	httpAddr string
	scheme   string
	client   *http.Client
	token    string
}

// serveOptions are one process's flags and environment.
type serveOptions struct {
	grace time.Duration // --shutdown-grace; 0: 10 s
	bin   string        // the inferq binary; "": the harness's
	args  []string
	env   []string
	// watch are strings whose log lines are counted (logTail.count).
	watch []string
}

// startServer starts `inferq serve` with cfgPath and waits until its
// HTTP address is known; with logPath it keeps the log there.
func startServer(t *testing.T, h *harness, cfgPath, logPath string, o serveOptions, tlsConf *tls.Config, token string) *server {
	t.Helper()
	if o.grace == 0 {
		o.grace = 10 * time.Second
	}
	args := append([]string{"serve", "--config", cfgPath, "--log-format", "json", "--shutdown-grace", o.grace.String()}, o.args...)
	bin := h.bin
	if o.bin != "" {
		bin = o.bin
	}
	s := &server{cmd: exec.Command(bin, args...), done: make(chan struct{}), addr: make(chan string, 1),
		scheme: "http", token: token}
	s.cmd.Env = childEnv(append([]string{"INFERQ_ORT_LIB=" + h.lib}, o.env...))
	s.cmd.SysProcAttr = orphanKill()
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	if tlsConf != nil {
		s.scheme, tr.TLSClientConfig = "https", tlsConf
	}
	s.client = &http.Client{Transport: tr, Timeout: 5 * time.Second}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Stdout = io.Discard
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start inferq serve: %v", err)
	}
	s.logs = newLogTail(func(addr string) {
		select {
		case s.addr <- addr:
		default:
		}
	})
	for _, w := range o.watch {
		s.logs.watch(w)
	}
	if logPath != "" {
		f, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		s.logs.keep, s.logs.keepLeft = f, 100<<20
	}
	logsDone := make(chan struct{})
	go func() {
		s.logs.read(stderr)
		close(logsDone)
	}()
	go s.sampleRSS()
	go func() {
		<-logsDone
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	select {
	case s.httpAddr = <-s.addr:
	case <-s.done:
		t.Fatalf("inferq serve exited at start: %v\n%s", s.err, s.logs.tail(40))
	case <-time.After(60 * time.Second):
		s.kill()
		t.Fatalf("inferq serve did not log its HTTP address within 60 s\n%s", s.logs.tail(40))
	}
	return s
}

// exited reports whether the process has ended.
func (s *server) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// waitReady polls /readyz until it answers 200.
func (s *server) waitReady(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !s.ready() {
		if s.exited() {
			t.Fatalf("inferq serve exited before it was ready: %v\n%s", s.err, s.logs.tail(40))
		}
		if time.Now().After(deadline) {
			t.Fatalf("inferq serve not ready within %s\n%s", within, s.logs.tail(40))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ready reports whether /readyz answers 200 within the client's timeout
// (5 s).
func (s *server) ready() bool {
	code, err := s.get("/readyz", "")
	return err == nil && code == http.StatusOK
}

// get requests path with the bearer token tok ("": none) and returns the
// status code.
func (s *server) get(path, tok string) (int, error) {
	code, _, err := s.getBody(path, tok)
	return code, err
}

func (s *server) getBody(path, tok string) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodGet, s.scheme+"://"+s.httpAddr+path, nil)
	if err != nil {
		return 0, nil, err
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, body, err
}

// lookup asks /v1/tasks/{id} for a terminal record of id: what inferq
// keeps (spooled, undeliverable) but did not deliver.
func (s *server) lookup(id string) string {
	if s.exited() {
		return ""
	}
	code, body, err := s.getBody("/v1/tasks/"+pathEscape(id), s.token)
	if err != nil || code != http.StatusOK {
		return ""
	}
	var rec struct {
		Status string `json:"status"`
	}
	if json.Unmarshal(body, &rec) != nil || !terminal(rec.Status) {
		return ""
	}
	return rec.Status
}

// term sends SIGTERM and waits for the exit; it returns the exit error.
func (s *server) term(within time.Duration) error {
	s.stopping.Store(true)
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return s.err
	case <-time.After(within):
		s.kill()
		return fmt.Errorf("no exit within %s of SIGTERM (killed)", within)
	}
}

// kill sends SIGKILL and waits for the exit.
func (s *server) kill() {
	s.stopping.Store(true)
	_ = s.cmd.Process.Kill()
	<-s.done
}

// sampleRSS keeps the process's peak RSS (VmHWM) until it exits.
func (s *server) sampleRSS() {
	path := fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(path); err == nil {
			if hwm := statusKB(b, "VmHWM:"); hwm*1024 > s.hwm.Load() {
				s.hwm.Store(hwm * 1024)
			}
		}
		select {
		case <-s.done:
			return
		case <-tick.C:
		}
	}
}

// statusKB reads a "Key:   123 kB" line of /proc/<pid>/status.
func statusKB(b []byte, key string) int64 {
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+len(key):]))
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.ParseInt(f[0], 10, 64)
	return n
}

// logTail reads a process's log: it keeps the last lines (each cut to
// 2 KiB), the longest line's length, panics, and how often each of the
// needles occurred, without ever holding a whole long line.
type logTail struct {
	onHTTP func(addr string)
	// keep, when set, receives the log's first keepLeft bytes.
	keep     io.Writer
	keepLeft int

	mu      sync.Mutex
	lines   []string
	bytes   int64
	longest int
	panics  int
	needles map[string]int
}

const tailLines = 60

func newLogTail(onHTTP func(string)) *logTail {
	return &logTail{onHTTP: onHTTP, needles: map[string]int{}}
}

// watch counts the lines that contain needle from now on.
func (l *logTail) watch(needle string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.needles[needle] += 0
}

// count returns how many lines contained needle.
func (l *logTail) count(needle string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.needles[needle]
}

func (l *logTail) read(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte // the line's first 64 KiB
	n := 0          // its full length
	for {
		chunk, err := br.ReadSlice('\n')
		if l.keep != nil && l.keepLeft > 0 {
			n, _ := l.keep.Write(chunk[:min(len(chunk), l.keepLeft)])
			l.keepLeft -= n
		}
		if len(line) < maxLogLine {
			line = append(line, chunk[:min(len(chunk), maxLogLine-len(line))]...)
		}
		n += len(chunk)
		if errors.Is(err, bufio.ErrBufferFull) {
			l.scanNeedles(chunk)
			continue
		}
		if n > 0 {
			l.scanNeedles(chunk)
			l.add(line, n)
		}
		line, n = line[:0], 0
		if err != nil {
			return
		}
	}
}

func (l *logTail) scanNeedles(chunk []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.needles {
		if bytes.Contains(chunk, []byte(k)) {
			l.needles[k]++
		}
	}
}

func (l *logTail) add(line []byte, n int) {
	text := strings.TrimRight(string(line[:min(len(line), 2048)]), "\n")
	if bytes.Contains(line, []byte(`"msg":"http listening"`)) {
		var e struct {
			Addr string `json:"addr"`
		}
		if json.Unmarshal(bytes.TrimSpace(line), &e) == nil && e.Addr != "" {
			l.onHTTP(e.Addr)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bytes += int64(n)
	l.longest = max(l.longest, n)
	if strings.HasPrefix(text, "panic:") || strings.HasPrefix(text, "fatal error:") {
		l.panics++
	}
	if n > len(text)+1 {
		text += fmt.Sprintf(" ... (%d bytes)", n)
	}
	l.lines = append(l.lines, text)
	if len(l.lines) > 2*tailLines {
		l.lines = append(l.lines[:0], l.lines[len(l.lines)-tailLines:]...)
	}
}

// tail returns the last n lines.
func (l *logTail) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines[max(0, len(l.lines)-n):], "\n")
}

func (l *logTail) stats() (longest, panics int, total int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.longest, l.panics, l.bytes
}

// orphanKill makes the kernel kill a child process when the harness dies
// (a test timeout, a kill), so that no broker or inferq outlives it.
func orphanKill() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// pathEscape escapes an id for a URL path segment.
func pathEscape(id string) string {
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// waitFor polls cond every 20 ms until it holds or d passes, and reports
// whether it held.
func waitFor(ctx context.Context, d time.Duration, cond func() bool) bool {
	return waitEvery(ctx, d, 20*time.Millisecond, cond)
}

// waitEvery polls cond every interval until it holds or d passes, and
// reports whether it held.
func waitEvery(ctx context.Context, d, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(interval)
	}
	return true
}
