package amqppub_test

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// proxy is a TCP proxy between the Publisher and the broker that a test
// can cut, stall, or have inject connection.blocked. It forwards what the
// broker sends frame by frame, so that an injected frame lands between two
// frames.
type proxy struct {
	l           net.Listener
	target      string
	clientBytes atomic.Int64 // bytes forwarded from clients to the broker
	ended       atomic.Int64 // connections whose client side ended

	mu      sync.Mutex
	pairs   []*pair
	stall   chan struct{} // non-nil while stalled; closed on resume
	stallUp bool          // the stall holds what clients send too
	cutAck  int           // cut every connection after this many basic.acks; 0: never
	acks    int
}

// pair is one proxied connection.
type pair struct {
	client, server net.Conn
	wmu            sync.Mutex // serialises writes to client
}

// newProxy listens on a free port of 127.0.0.1 and forwards to the test
// broker; it closes at cleanup.
func newProxy(tb testing.TB, target string) *proxy {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	p := &proxy{l: l, target: target}
	go p.accept()
	tb.Cleanup(func() { _ = l.Close(); p.resume(); p.cut() })
	return p
}

// url is the AMQP URL of the proxy with the guest user.
func (p *proxy) url() string { return "amqp://guest:guest@" + p.l.Addr().String() + "/" }

func (p *proxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		pr := &pair{client: c, server: s}
		p.mu.Lock()
		p.pairs = append(p.pairs, pr)
		p.mu.Unlock()
		go p.up(pr)
		go p.down(pr)
	}
}

// up copies client to server, counting bytes.
func (p *proxy) up(pr *pair) {
	buf := make([]byte, 32<<10)
	for {
		n, err := pr.client.Read(buf)
		if n > 0 {
			p.clientBytes.Add(int64(n))
			p.waitResumeUp()
			if _, werr := pr.server.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	p.ended.Add(1)
	_ = pr.server.Close()
	_ = pr.client.Close()
}

// down copies server to client frame by frame, holding frames while
// stalled, and cuts every connection after the cutAck-th basic.ack.
func (p *proxy) down(pr *pair) {
	defer func() { _ = pr.client.Close(); _ = pr.server.Close() }()
	header := make([]byte, 7)
	for {
		if _, err := io.ReadFull(pr.server, header); err != nil {
			return
		}
		size := binary.BigEndian.Uint32(header[3:])
		frame := make([]byte, 7+int(size)+1)
		copy(frame, header)
		if _, err := io.ReadFull(pr.server, frame[7:]); err != nil {
			return
		}
		p.waitResume()
		if !p.forward(pr, frame) {
			return
		}
	}
}

// forward writes frame to the client, and reports false once the
// connection is cut.
func (p *proxy) forward(pr *pair, frame []byte) bool {
	isAck := frame[0] == 1 && len(frame) >= 11 && binary.BigEndian.Uint16(frame[7:]) == 60 && binary.BigEndian.Uint16(frame[9:]) == 80
	pr.wmu.Lock()
	_, err := pr.client.Write(frame)
	pr.wmu.Unlock()
	if err != nil {
		return false
	}
	if isAck {
		p.mu.Lock()
		p.acks++
		cut := p.cutAck > 0 && p.acks >= p.cutAck
		if cut {
			p.cutAck = 0
		}
		p.mu.Unlock()
		if cut {
			p.cut()
			return false
		}
	}
	return true
}

func (p *proxy) waitResume() {
	p.mu.Lock()
	ch := p.stall
	p.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// cutAfterAcks cuts every connection once n more basic.acks have passed.
func (p *proxy) cutAfterAcks(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.acks, p.cutAck = 0, n
}

// cut closes every connection open through the proxy; new ones are
// accepted.
func (p *proxy) cut() {
	p.mu.Lock()
	pairs := p.pairs
	p.pairs = nil
	p.mu.Unlock()
	for _, pr := range pairs {
		_ = pr.client.Close()
		_ = pr.server.Close()
	}
}

// waitResumeUp waits while the stall holds what clients send.
func (p *proxy) waitResumeUp() {
	p.mu.Lock()
	ch, up := p.stall, p.stallUp
	p.mu.Unlock()
	if up && ch != nil {
		<-ch
	}
}

// stallBoth holds what the broker sends and what it is sent until
// resume, as a broker that is stuck (but for the heartbeats beatUntil
// plays) would: it neither answers nor reads.
func (p *proxy) stallBoth() {
	p.stallDown()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stallUp = true
}

// stallDown holds every frame from the broker until resume.
func (p *proxy) stallDown() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stall == nil {
		p.stall = make(chan struct{})
	}
}

// resume forwards the held frames and what follows.
func (p *proxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stallUp = false
	if p.stall != nil {
		close(p.stall)
		p.stall = nil
	}
}

// inject sends a connection-level method frame (class 10) to every
// client, between two frames of the broker's, even while stalled.
func (p *proxy) inject(tb testing.TB, method uint16, args []byte) {
	tb.Helper()
	payload := binary.BigEndian.AppendUint16(nil, 10)
	payload = binary.BigEndian.AppendUint16(payload, method)
	payload = append(payload, args...)
	frame := []byte{1, 0, 0}
	frame = binary.BigEndian.AppendUint32(frame, uint32(len(payload)))
	frame = append(append(frame, payload...), 0xCE)
	p.mu.Lock()
	pairs := p.pairs
	p.mu.Unlock()
	require.NotEmpty(tb, pairs, "no connection to inject into")
	for _, pr := range pairs {
		pr.wmu.Lock()
		_, err := pr.client.Write(frame)
		pr.wmu.Unlock()
		if err != nil && !errors.Is(err, net.ErrClosed) {
			require.NoError(tb, err)
		}
	}
}

// block injects connection.blocked, unblock connection.unblocked.
func (p *proxy) block(tb testing.TB) {
	reason := "low on memory (test)"
	p.inject(tb, 60, append([]byte{byte(len(reason))}, reason...))
}

func (p *proxy) unblock(tb testing.TB) { p.inject(tb, 61, nil) }

// heartbeat is an AMQP heartbeat frame.
var heartbeat = []byte{8, 0, 0, 0, 0, 0, 0, 0xCE}

// beatUntil sends heartbeats to every client, as a live broker that
// answers nothing else would, until done is closed: the client then
// never times the connection out.
func (p *proxy) beatUntil(done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		default:
		}
		p.mu.Lock()
		pairs := p.pairs
		p.mu.Unlock()
		for _, pr := range pairs {
			pr.wmu.Lock()
			_, _ = pr.client.Write(heartbeat)
			pr.wmu.Unlock()
		}
		time.Sleep(10 * time.Millisecond) // pacing only; nothing waits on it
	}
}
