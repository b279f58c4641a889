package dispatcher

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
)

// ErrWakeupUnavailable is returned by Start and Run in WakeupRequired mode
// when the start-up self-probe shows that notifications do not arrive.
var ErrWakeupUnavailable = errors.New("pgoutbox: LISTEN/NOTIFY wake-ups are not working")

// requireWakeups is the start-up check of WakeupRequired mode: it opens
// the listener connection and proves with a self-probe that notifications
// reach it. It returns the listening connection, or nil in other modes.
func (d *Dispatcher) requireWakeups(ctx context.Context) (*pgx.Conn, error) {
	if d.cfg.Wakeup != WakeupRequired {
		return nil, nil
	}
	d.health.setListener(ListenerProbing)
	conn, err := d.openWakeups(ctx)
	switch {
	case ctx.Err() != nil: // stopping: not a verdict on wake-ups
		if conn != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
		}
		return nil, ctx.Err()
	case err != nil:
		d.health.setListener(ListenerUnavailable)
		return nil, errtext.WrapAs(ErrWakeupUnavailable, err, "")
	}
	return conn, nil
}

// autoWakeups runs the wake-ups of WakeupAuto mode beside dispatching,
// which polls meanwhile and does not wait for it: it opens the listener,
// probes it, and switches wake-ups on when notifications arrive, or logs
// once and leaves the dispatcher polling when the probe times out (they do
// not arrive) or the server refuses the listener (see reconnect). A
// connection error (a failover, a proxy restart, a killed backend) is no
// verdict: it reconnects with backoff and probes again. It returns when
// quit ends.
func (d *Dispatcher) autoWakeups(quit context.Context) {
	d.health.setListener(ListenerProbing)
	conn, err := d.openWakeups(quit)
	if err != nil {
		conn = d.reconnect(quit, "listener connect failed; retrying", err)
	}
	if conn != nil {
		d.listenLoop(quit, conn)
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
func (d *Dispatcher) reconnect(quit context.Context, why string, err error) *pgx.Conn {
	backoff := 100 * time.Millisecond
	for {
		switch {
		case quit.Err() != nil:
			return nil
		case d.cfg.Wakeup == WakeupAuto && (errors.Is(err, errNoNotification) || refused(err)):
			d.health.setListener(ListenerUnavailable)
			d.cfg.Logger.Warn("pgoutbox: LISTEN/NOTIFY wake-ups are not working; polling only",
				"table", d.cfg.Table.String(), "owner", d.cfg.Owner, "error", err)
			return nil
		}
		d.health.setListener(ListenerReconnecting)
		d.report.Error(why, err)
		if !sleep(quit.Done(), backoff) {
			return nil
		}
		backoff = min(2*backoff, 5*time.Second)
		var conn *pgx.Conn
		if conn, err = d.openWakeups(quit); err == nil {
			return conn
		}
		why = "listener reconnect failed"
	}
}

// openWakeups opens the listener connection and proves with a self-probe
// that notifications reach it.
func (d *Dispatcher) openWakeups(ctx context.Context) (*pgx.Conn, error) {
	conn, err := d.listen(ctx)
	if err == nil {
		err = d.probe(ctx, conn)
	}
	if err != nil && conn != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		conn = nil
	}
	return conn, err
}

// listen opens a dedicated connection and LISTENs on the wake-up channel.
func (d *Dispatcher) listen(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := d.opContextFrom(ctx)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, d.listenerConfig)
	if err != nil {
		return nil, errtext.Wrap(err, "listener connect")
	}
	channel := sqlname.Names{Table: d.cfg.Table}.Channel()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, errtext.Wrap(err, "listen")
	}
	return conn, nil
}

// probe sends a notification on a private channel through the pool and
// waits for it on conn. Wake-ups on the real channel that arrive meanwhile
// are passed on.
func (d *Dispatcher) probe(parent context.Context, conn *pgx.Conn) error {
	var b [8]byte
	_, _ = rand.Read(b[:])
	channel := "pgoutbox_probe_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(parent, d.cfg.WakeupProbeTimeout)
	defer cancel()
	quoted := pgx.Identifier{channel}.Sanitize()
	if _, err := conn.Exec(ctx, "LISTEN "+quoted); err != nil {
		return errtext.Wrap(err, "probe listen")
	}
	if _, err := d.pool.Exec(ctx, "SELECT pg_notify($1, '')", channel); err != nil {
		return errtext.Wrap(err, "probe notify")
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && parent.Err() == nil {
			return errtext.WrapAs(errNoNotification, err, "within %s", d.cfg.WakeupProbeTimeout)
		}
		if err != nil {
			return errtext.Wrap(err, "probe wait")
		}
		if n.Channel == channel {
			_, err := conn.Exec(ctx, "UNLISTEN "+quoted)
			return err
		}
		d.notified(parent, n.Payload)
	}
}

// listenLoop turns notifications into triggers until quit ends. When the
// connection breaks it reconnects with backoff, LISTENs and probes again
// (see reconnect) and triggers a claim cycle to pick up what was committed
// while it was gone.
func (d *Dispatcher) listenLoop(quit context.Context, conn *pgx.Conn) {
	for conn != nil {
		d.wakeupsActive.Store(true)
		d.health.setListener(ListenerActive)
		d.report.Counters.ListenerConnects.Add(1)
		d.Trigger()
		d.sayHello(quit, false) // see peers.go
		err := d.waitNotifications(quit, conn)
		d.wakeupsActive.Store(false)
		_ = conn.Close(context.WithoutCancel(quit))
		conn = d.reconnect(quit, "listener connection lost; reconnecting", err)
	}
}

// waitNotifications triggers a claim cycle per notification (a hello of
// another dispatcher goes to heard instead: see peers.go); many that
// arrive during one cycle coalesce into one more. When nothing arrives for
// listenerPing it pings the connection, so that a half-open connection
// (a NAT timeout, a failover without a reset) is noticed within seconds
// rather than when TCP keepalive gives up.
func (d *Dispatcher) waitNotifications(quit context.Context, conn *pgx.Conn) error {
	for {
		ctx, cancel := context.WithTimeout(quit, listenerPing)
		n, err := conn.WaitForNotification(ctx)
		cancel()
		switch {
		case err == nil:
			d.notified(quit, n.Payload)
		case quit.Err() != nil:
			return err
		case errors.Is(err, context.DeadlineExceeded):
			if err := d.ping(quit, conn); err != nil {
				return err
			}
		default:
			return err
		}
	}
}

// listenerPing is how long the listener waits for a notification before it
// checks that its connection is alive.
const listenerPing = 30 * time.Second

// ping checks the listener connection with a bounded round trip.
func (d *Dispatcher) ping(quit context.Context, conn *pgx.Conn) error {
	ctx, cancel := context.WithTimeout(quit, 5*time.Second)
	defer cancel()
	if err := conn.Ping(ctx); err != nil {
		return errtext.Wrap(err, "listener ping")
	}
	return nil
}

// sleep waits for d or until done closes; it reports whether d passed.
func sleep(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}
