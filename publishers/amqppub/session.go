package amqppub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// session is one connection and what the Publisher knows about it: whether
// the broker blocked it, the exchanges found to exist, and its idle
// confirm channels. A lost connection ends its session; the next call
// dials a new one.
type session struct {
	conn    *amqp.Connection
	raw     io.Closer // the socket under conn, when the default DialFunc made it
	blocked atomic.Bool
	// blockedCh is closed and replaced each time the broker blocks the
	// connection, so that waiting calls fail at once.
	blockMu   sync.Mutex
	blockedCh chan struct{}
	exchanges sync.Map // exchange name -> struct{}: known to exist
}

// newSession watches conn, over the socket raw (nil when unknown), for
// connection.blocked and unblocked.
func newSession(conn *amqp.Connection, raw io.Closer) *session {
	s := &session{conn: conn, raw: raw, blockedCh: make(chan struct{})}
	s.exchanges.Store("", struct{}{}) // the default exchange always exists
	blocks := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	go s.watchBlocked(blocks)
	return s
}

// watchBlocked records every connection.blocked and unblocked until the
// connection closes (which closes blocks).
func (s *session) watchBlocked(blocks <-chan amqp.Blocking) {
	for b := range blocks {
		s.blocked.Store(b.Active)
		if b.Active {
			s.blockMu.Lock()
			close(s.blockedCh)
			s.blockedCh = make(chan struct{})
			s.blockMu.Unlock()
		}
	}
}

// close closes the connection, waiting at most timeout for the broker's
// answer: a broker that stalls but still sends heartbeats never answers,
// and the client would wait for ever. Then it closes the socket, which
// ends the client's wait, and reports the close as unanswered.
func (s *session) close(timeout time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- s.conn.Close() }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-done:
		if errors.Is(err, amqp.ErrClosed) {
			return nil
		}
		return err
	case <-t.C:
	}
	if s.raw != nil {
		_ = s.raw.Close()
	}
	return fmt.Errorf("%w: the broker did not answer connection.close within the confirm timeout", ErrConnection)
}

// blockedSignal returns a channel closed when the broker next blocks the
// connection.
func (s *session) blockedSignal() <-chan struct{} {
	s.blockMu.Lock()
	defer s.blockMu.Unlock()
	return s.blockedCh
}

// confirmChannel is a channel in confirm mode with the listeners Publish
// needs: returned messages and the channel's own close.
type confirmChannel struct {
	s       *session
	ch      *amqp.Channel
	returns chan amqp.Return
	closes  chan *amqp.Error
}

// openChannel opens a channel on s in confirm mode; returns is buffered
// for window returned messages, so the connection's reader never waits on
// it within a call.
func (s *session) openChannel(window int) (*confirmChannel, error) {
	ch, err := s.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("%w: open a channel: %w", ErrConnection, err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("%w: put the channel in confirm mode: %w", ErrConnection, err)
	}
	return &confirmChannel{
		s:       s,
		ch:      ch,
		returns: ch.NotifyReturn(make(chan amqp.Return, window)),
		closes:  ch.NotifyClose(make(chan *amqp.Error, 1)),
	}, nil
}

// checkExchanges makes sure every exchange in names exists before a call
// publishes to it: a publish to a missing exchange would close the call's
// channel (404) and lose the confirms of every other message on it. It
// asks the broker once per exchange and connection (a passive declare, on
// a channel of its own that a 404 closes), calling answered after each
// answer, and returns the missing ones; err is an outage that stopped the
// check.
func (s *session) checkExchanges(names []string, answered func()) (missing map[string]error, err error) {
	var probe *amqp.Channel
	defer func() {
		if probe != nil {
			_ = probe.Close()
		}
	}()
	for _, name := range names {
		if _, ok := s.exchanges.Load(name); ok {
			continue
		}
		if probe == nil {
			if probe, err = s.conn.Channel(); err != nil {
				return nil, fmt.Errorf("%w: open a channel: %w", ErrConnection, err)
			}
		}
		err := probe.ExchangeDeclarePassive(name, amqp.ExchangeDirect, false, false, false, false, nil)
		answered()
		if err == nil {
			s.exchanges.Store(name, struct{}{})
			continue
		}
		probe = nil // closed by the broker, or by the lost connection
		var amqpErr *amqp.Error
		if !errors.As(err, &amqpErr) || amqpErr.Code != amqp.NotFound {
			return nil, fmt.Errorf("%w: check exchange %q: %w", ErrConnection, name, err)
		}
		if missing == nil {
			missing = make(map[string]error)
		}
		missing[name] = fmt.Errorf("%w (%d %s)", ErrMissingExchange, amqpErr.Code, amqpErr.Reason)
	}
	return missing, nil
}

// forget drops name from the exchanges known to exist, after a publish to
// it met a 404.
func (s *session) forget(name string) { s.exchanges.Delete(name) }

// dial opens a connection with the default DialFunc: amqp.DialConfig on
// p.URL, each socket write bounded by p.Timeout. It also returns the
// socket, which a close the broker does not answer closes.
func dial(_ context.Context, p DialParams) (*amqp.Connection, io.Closer, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(connectionName)
	var raw net.Conn
	conn, err := amqp.DialConfig(p.URL, amqp.Config{
		Heartbeat:  defaultHeartbeat,
		Properties: props,
		Dial: func(network, addr string) (net.Conn, error) {
			conn, err := amqp.DefaultDial(p.Timeout)(network, addr)
			if err != nil {
				return nil, err
			}
			raw = &writeDeadlineConn{Conn: conn, timeout: p.Timeout}
			return raw, nil
		},
	})
	return conn, raw, err
}

// writeDeadlineConn gives every write its own deadline, so a broker that
// stops reading (blocked, stalled, a half-open connection) fails the write
// rather than hanging it; the client then closes the connection.
type writeDeadlineConn struct {
	net.Conn
	timeout time.Duration
}

func (c *writeDeadlineConn) Write(b []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}
