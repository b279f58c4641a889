// Package wakeup owns the dispatcher's LISTEN connection: the dedicated
// connection that LISTENs on the table's wake-up channel, so that an
// emitted event is dispatched without waiting for the next poll.
//
// Before it is trusted, a connection proves with a self-probe (a
// notification on a private channel, sent through the pool) that
// notifications reach it: behind a pooler in transaction mode they do not.
// While listening it passes each notification's payload on, pings the
// connection when nothing arrived for a while (a half-open connection is
// noticed within seconds), and when the connection breaks reconnects with
// backoff and probes again.
//
// # Inputs
//
// A Config: the connection's configuration, the pool (for the probe), the
// channel, the mode (Auto gives up when wake-ups do not work), the
// connect, probe and ping bounds, and callbacks for each notification's
// payload (NotifyFunc: the dispatcher's wake-ups and the hellos of
// peers.go), the listener's State (StateFunc: Health, the claim cycle
// after a (re)connect), and the errors it recovers from (ErrorFunc).
//
// # Who calls it
//
// The dispatcher: Require at start-up in WakeupRequired mode; Run in a
// goroutine of its own beside dispatching (WakeupRequired with the
// connection Require returned, WakeupAuto without), which returns when its
// quit context ends. It holds no lock.
package wakeup
