package dispatcher_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// replyProxy forwards TCP connections to PostgreSQL and can hold back the
// server's replies to statements, as a network that delays them: a
// statement sent while replies are held runs (and commits) on the server,
// but its client hears nothing until they are let through. Connection
// set-up and statement preparation pass, so that every statement sent is
// executed.
type replyProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu     sync.Mutex
	gate   chan struct{} // while replies are held: closed to let them through
	conns  map[net.Conn]struct{}
	closed bool
}

// newReplyProxy starts a proxy to target (host:port), closed when the test
// ends.
func newReplyProxy(t *testing.T, target string) *replyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &replyProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// hold makes replies to statements wait from now on, until release.
func (p *replyProxy) hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate == nil {
		p.gate = make(chan struct{})
	}
}

// release lets the held replies, and all that follow, through.
func (p *replyProxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
	}
}

func (p *replyProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		if !p.track(client, server) {
			return
		}
		p.wg.Go(func() {
			_, _ = io.Copy(server, client)
			p.untrack(client, server)
		})
		p.wg.Go(func() {
			p.forwardReplies(client, server)
			p.untrack(client, server)
		})
	}
}

// forwardReplies copies the server's messages to the client one by one. A
// message that reports on an executed statement (BindComplete, DataRow,
// CommandComplete, EmptyQueryResponse, PortalSuspended, ErrorResponse)
// waits while replies are held, and so does all that follows it on the
// connection. (Without SSL, everything the server sends is a message: a
// type byte, then a length that counts itself.)
func (p *replyProxy) forwardReplies(client, server net.Conn) {
	r := bufio.NewReader(server)
	for {
		var header [5]byte
		if _, err := io.ReadFull(r, header[:]); err != nil {
			return
		}
		msg := make([]byte, 1+binary.BigEndian.Uint32(header[1:]))
		copy(msg, header[:])
		if _, err := io.ReadFull(r, msg[len(header):]); err != nil {
			return
		}
		if strings.IndexByte("2DCIsE", msg[0]) >= 0 {
			p.mu.Lock()
			gate := p.gate
			p.mu.Unlock()
			if gate != nil {
				<-gate
			}
		}
		if _, err := client.Write(msg); err != nil {
			return
		}
	}
}

func (p *replyProxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

// untrack closes both ends of a forwarded connection.
func (p *replyProxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

func (p *replyProxy) close() {
	p.mu.Lock()
	p.closed = true
	_ = p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.release()
	p.wg.Wait()
}

// newProxiedPool returns a pool on db's schema whose connections go
// through a replyProxy, and the proxy. The pool never pings an idle
// connection before handing it out (a ping is a statement: it would wait
// while replies are held, and the statement after it with it), and has
// room for the connections of statements that wait.
func newProxiedPool(t *testing.T, db *testdb.DB) (*pgxpool.Pool, *replyProxy) {
	t.Helper()
	cfg := poolConfig(t, db)
	cfg.MaxConns = 16
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	target := net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
	p := newReplyProxy(t, target)
	addr := p.ln.Addr().(*net.TCPAddr)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = addr.IP.String(), uint16(addr.Port)
	cfg.ConnConfig.Fallbacks = nil
	return openPool(t, cfg), p
}
