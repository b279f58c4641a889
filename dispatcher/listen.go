package dispatcher

import (
	"context"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/complete"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/wakeup"
)

// ErrWakeupUnavailable is returned by Start and Run in WakeupRequired mode
// when the start-up self-probe shows that notifications do not arrive.
var ErrWakeupUnavailable = wakeup.ErrUnavailable

// listenerPing is how long the listener waits for a notification before it
// checks that its connection is alive.
const listenerPing = 30 * time.Second

// newListener returns the LISTEN connection's service (internal/wakeup) of
// this dispatcher.
func newListener(d *Dispatcher) *wakeup.Listener {
	return wakeup.New(wakeup.Config{
		ConnConfig: d.listenerConfig, Pool: d.pool, Channel: sqlname.Names{Table: d.cfg.Table}.Channel(),
		Auto: d.cfg.Wakeup == WakeupAuto, ConnectTimeout: opTimeout(d.cfg.LeaseDuration),
		ProbeTimeout: d.cfg.WakeupProbeTimeout, PingAfter: listenerPing,
		Table: d.cfg.Table.String(), Owner: d.cfg.Owner, Logger: d.cfg.Logger,
		NotifyFunc: d.greeter.Notified, StateFunc: d.listenerChanged, ErrorFunc: d.report.Error, RefusedFunc: complete.Refused,
	})
}

// listenerChanged takes a change of the listener: Health's listener
// state, WakeupsActive, and once it listens (after each reconnect too) a
// claim cycle to pick up what was committed while it was gone, and a
// hello (see peers.go).
func (d *Dispatcher) listenerChanged(ctx context.Context, s wakeup.State) {
	switch s {
	case wakeup.Probing:
		d.health.setListener(ListenerProbing)
	case wakeup.Listening:
		d.wakeupsActive.Store(true)
		d.health.setListener(ListenerActive)
		d.report.Counters.ListenerConnects.Add(1)
		d.Trigger()
		d.greeter.Say(ctx) // see peers.go
	case wakeup.Closed:
		d.wakeupsActive.Store(false)
	case wakeup.Reconnecting:
		d.health.setListener(ListenerReconnecting)
	case wakeup.Unavailable:
		d.health.setListener(ListenerUnavailable)
	}
}
