package wakeup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/tmplmigrate"
)

// ErrUnavailable is returned by Require when the self-probe shows that
// notifications do not arrive (the dispatcher's ErrWakeupUnavailable).
var ErrUnavailable = errors.New("pgoutbox: LISTEN/NOTIFY wake-ups are not working")

// Require is the start-up check of WakeupRequired mode: it opens
// the listener connection and proves with a self-probe that notifications
// reach it. It returns the listening connection, for Run; an error that
// matches ErrUnavailable when wake-ups do not work; or ctx's error when
// ctx ended first (stopping: not a verdict on wake-ups).
func (l *Listener) Require(ctx context.Context) (*pgx.Conn, error) {
	l.cfg.StateFunc(ctx, Probing)
	conn, err := l.openWakeups(ctx)
	switch {
	case ctx.Err() != nil: // stopping: not a verdict on wake-ups
		if conn != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
		}
		return nil, ctx.Err()
	case err != nil:
		l.cfg.StateFunc(ctx, Unavailable)
		return nil, errtext.WrapAs(ErrUnavailable, err, "")
	}
	return conn, nil
}

// Run runs the listener until quit ends. With conn (the connection
// Require returned) it listens on it (listenLoop); without, it opens one
// first (autoWakeups).
func (l *Listener) Run(quit context.Context, conn *pgx.Conn) {
	if conn != nil {
		l.listenLoop(quit, conn)
		return
	}
	l.autoWakeups(quit)
}

// autoWakeups runs the wake-ups of WakeupAuto mode beside dispatching,
// which polls meanwhile and does not wait for it: it opens the listener,
// probes it, and switches wake-ups on when notifications arrive, or logs
// once and leaves the dispatcher polling when the probe times out (they do
// not arrive) or the server refuses the listener (see reconnect). A
// connection error (a failover, a proxy restart, a killed backend) is no
// verdict: it reconnects with backoff and probes again. It returns when
// quit ends.
func (l *Listener) autoWakeups(quit context.Context) {
	l.cfg.StateFunc(quit, Probing)
	conn, err := l.openWakeups(quit)
	if err != nil {
		conn = l.reconnect(quit, "listener connect failed; retrying", err)
	}
	if conn != nil {
		l.listenLoop(quit, conn)
	}
}

// errNoNotification is the probe's error when its notification did not
// arrive in time: wake-ups do not work on this connection.
var errNoNotification = errors.New("pgoutbox: probe notification did not arrive")

// reconnect reports err (the reason, unless quit ended or wake-ups are
// judged unavailable), then opens and probes the listener again with
// backoff until it works. It returns nil when quit ends, or in WakeupAuto
// mode when notifications do not arrive or the server refuses the
// listener with an SQL error that retrying will not fix (a wrong
// password, a missing role or database, no permission): wake-ups are then
// unavailable. Network errors and a terminated backend are retried.
func (l *Listener) reconnect(quit context.Context, why string, err error) *pgx.Conn {
	backoff := 100 * time.Millisecond
	for {
		switch {
		case quit.Err() != nil:
			return nil
		case l.cfg.Auto && (errors.Is(err, errNoNotification) || l.cfg.RefusedFunc(err)):
			l.cfg.StateFunc(quit, Unavailable)
			l.cfg.Logger.Warn("pgoutbox: LISTEN/NOTIFY wake-ups are not working; polling only",
				"table", l.cfg.Table, "owner", l.cfg.Owner, "error", err)
			return nil
		}
		l.cfg.StateFunc(quit, Reconnecting)
		l.cfg.ErrorFunc(why, err)
		if tmplmigrate.Sleep(quit, backoff) != nil {
			return nil
		}
		backoff = min(2*backoff, 5*time.Second)
		var conn *pgx.Conn
		if conn, err = l.openWakeups(quit); err == nil {
			return conn
		}
		why = "listener reconnect failed"
	}
}

// openWakeups opens the listener connection and proves with a self-probe
// that notifications reach it.
func (l *Listener) openWakeups(ctx context.Context) (*pgx.Conn, error) {
	conn, err := l.listen(ctx)
	if err == nil {
		err = l.probe(ctx, conn)
	}
	if err != nil && conn != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		conn = nil
	}
	return conn, err
}

// listen opens a dedicated connection and LISTENs on the wake-up channel.
func (l *Listener) listen(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.ConnectTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, l.cfg.ConnConfig)
	if err != nil {
		return nil, errtext.Wrap(err, "listener connect")
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.cfg.Channel}.Sanitize()); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, errtext.Wrap(err, "listen")
	}
	return conn, nil
}

// probe sends a notification on a private channel through the pool and
// waits for it on conn. Wake-ups on the real channel that arrive meanwhile
// are passed on.
func (l *Listener) probe(parent context.Context, conn *pgx.Conn) error {
	var b [8]byte
	_, _ = rand.Read(b[:])
	channel := "pgoutbox_probe_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(parent, l.cfg.ProbeTimeout)
	defer cancel()
	quoted := pgx.Identifier{channel}.Sanitize()
	if _, err := conn.Exec(ctx, "LISTEN "+quoted); err != nil {
		return errtext.Wrap(err, "probe listen")
	}
	if _, err := l.cfg.Pool.Exec(ctx, "SELECT pg_notify($1, '')", channel); err != nil {
		return errtext.Wrap(err, "probe notify")
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && parent.Err() == nil {
			return errtext.WrapAs(errNoNotification, err, "within %s", l.cfg.ProbeTimeout)
		}
		if err != nil {
			return errtext.Wrap(err, "probe wait")
		}
		if n.Channel == channel {
			_, err := conn.Exec(ctx, "UNLISTEN "+quoted)
			return err
		}
		l.cfg.NotifyFunc(parent, n.Payload)
	}
}

// listenLoop turns notifications into triggers until quit ends. When the
// connection breaks it reconnects with backoff, LISTENs and probes again
// (see reconnect) and triggers a claim cycle to pick up what was committed
// while it was gone.
func (l *Listener) listenLoop(quit context.Context, conn *pgx.Conn) {
	for conn != nil {
		l.cfg.StateFunc(quit, Listening) // the dispatcher triggers a claim cycle and says hello (peers.go)
		err := l.waitNotifications(quit, conn)
		l.cfg.StateFunc(quit, Closed)
		_ = conn.Close(context.WithoutCancel(quit))
		conn = l.reconnect(quit, "listener connection lost; reconnecting", err)
	}
}

// waitNotifications passes each notification's payload to NotifyFunc
// (the dispatcher triggers a claim cycle per notification; a hello of
// another dispatcher goes to heard instead: see peers.go; many that
// arrive during one cycle coalesce into one more). When nothing arrives for
// PingAfter it pings the connection, so that a half-open connection
// (a NAT timeout, a failover without a reset) is noticed within seconds
// rather than when TCP keepalive gives up.
func (l *Listener) waitNotifications(quit context.Context, conn *pgx.Conn) error {
	for {
		ctx, cancel := context.WithTimeout(quit, l.cfg.PingAfter)
		n, err := conn.WaitForNotification(ctx)
		cancel()
		switch {
		case err == nil:
			l.cfg.NotifyFunc(quit, n.Payload)
		case quit.Err() != nil:
			return err
		case errors.Is(err, context.DeadlineExceeded):
			if err := l.ping(quit, conn); err != nil {
				return err
			}
		default:
			return err
		}
	}
}

// ping checks the listener connection with a bounded round trip.
func (l *Listener) ping(quit context.Context, conn *pgx.Conn) error {
	ctx, cancel := context.WithTimeout(quit, 5*time.Second)
	defer cancel()
	if err := conn.Ping(ctx); err != nil {
		return errtext.Wrap(err, "listener ping")
	}
	return nil
}
