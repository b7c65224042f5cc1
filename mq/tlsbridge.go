package mq

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/inferq/inferq/lograte"
)

// tlsBridge carries the SDK's queue stream connections to a broker that
// the SDK cannot dial itself. kubemq-go v1.9.0's queues_stream client dials
// its own gRPC connection from "host:port" and, for TLS, a CA file and a
// server name (qs.WithCredentials): it takes no dial options, no
// grpc.ClientConn and no client certificate, and the fields that hold its
// connection are unexported. So, when Config.TLS has a client certificate
// (or no CA: the system roots), the SDK dials the bridge instead: a Unix
// socket in a directory only this user can enter, in plaintext, and the
// bridge carries each connection to the broker over TLS with the Conn's
// tls.Config. The bytes are the SDK's HTTP/2 as they are; gRPC keepalive
// cannot be added to them, TCP keepalive is: a broker that is gone is
// noticed after about a minute of silence (30 s idle, 3 probes 10 s apart).
//
// Its goroutines end with close, which closes the connections it carries.
type tlsBridge struct {
	base string // the SDK's host is "unix:"+base, its port 1
	dir  string
	lis  net.Listener
	addr string // the broker's host:port
	dial tls.Dialer
	life context.Context
	warn *lograte.Limiter

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// newTLSBridge listens on a fresh socket and starts accepting. life bounds
// the dials to the broker. The socket's directory is made in the temp dir
// (os.TempDir: $TMPDIR, else /tmp), which must be writable: with a
// read-only root file system, mount a volume there (in Kubernetes an
// emptyDir at /tmp) or set TMPDIR.
func newTLSBridge(life context.Context, addr string, cfg *tls.Config, log *slog.Logger, every time.Duration) (*tlsBridge, error) {
	tmp := os.TempDir()
	dir, err := os.MkdirTemp(tmp, "inferq-mq-") // mode 0700
	if err != nil {
		return nil, fmt.Errorf("mq: tls bridge: the broker's TLS needs a socket in the temp dir %s, which is not a writable directory (%w): "+
			"set TMPDIR to one, or mount one at /tmp (in Kubernetes, an emptyDir)", tmp, err)
	}
	base := filepath.Join(dir, "s")
	lis, err := net.Listen("unix", base+":1")
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("mq: tls bridge: the broker's TLS needs a socket in the temp dir %s (%w): "+
			"set TMPDIR to a writable directory with a short path (a socket's path is at most about 100 bytes)", tmp, err)
	}
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"} // what gRPC's own TLS credentials offer
	keepAlive := net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 10 * time.Second, Count: 3}
	b := &tlsBridge{
		base: base, dir: dir, lis: lis, addr: addr, life: life,
		dial: tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second, KeepAliveConfig: keepAlive}, Config: cfg},
		warn: lograte.New(log, every), conns: map[net.Conn]struct{}{},
	}
	b.wg.Add(1)
	go b.accept()
	return b, nil
}

func (b *tlsBridge) accept() {
	defer b.wg.Done()
	for {
		local, err := b.lis.Accept()
		if err != nil {
			return // closed
		}
		if !b.track(local) {
			_ = local.Close()
			return
		}
		b.wg.Add(1)
		go b.carry(local)
	}
}

// track records conn for close; false once the bridge is closed.
func (b *tlsBridge) track(conn net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.conns[conn] = struct{}{}
	return true
}

func (b *tlsBridge) untrack(conn net.Conn) {
	b.mu.Lock()
	delete(b.conns, conn)
	b.mu.Unlock()
	_ = conn.Close()
}

// carry dials the broker for one SDK connection and copies both ways until
// either side ends. A failed dial closes the SDK's connection, which the
// SDK sees as a broker that is away.
func (b *tlsBridge) carry(local net.Conn) {
	defer b.wg.Done()
	defer b.untrack(local)
	remote, err := b.dial.DialContext(b.life, "tcp", b.addr)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			b.warn.Warn("mq tls bridge: dial broker failed", "addr", b.addr, "err", err)
		}
		return
	}
	if !b.track(remote) {
		_ = remote.Close()
		return
	}
	defer b.untrack(remote)
	b.warn.Reset("mq tls bridge: dial broker failed")
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(remote, local)
		_ = remote.Close()
	}()
	_, _ = io.Copy(local, remote)
	_ = local.Close()
	<-done
}

// close stops accepting, closes every carried connection, waits for the
// goroutines and removes the socket's directory.
func (b *tlsBridge) close() {
	b.mu.Lock()
	b.closed = true
	for conn := range b.conns {
		_ = conn.Close()
	}
	b.mu.Unlock()
	_ = b.lis.Close()
	b.wg.Wait()
	_ = os.RemoveAll(b.dir)
}
