// Package peers is how a dispatcher learns of the other dispatchers of its
// table, to notice a mix of ordering modes (the design is in
// dispatcher/peers.go, beside the public ModeConflict).
//
// The Greeter is the service: it says this dispatcher's hello (Hello,
// sent as Prefix then JSON with pg_notify on the table's wake-up channel)
// every third of LeaseDuration and in answer to a replica of another
// mode, hears the others' (Notified: every notification of the channel
// passes through it, and one that is not a hello is a wake-up), decides
// whether a hello's mode conflicts, logs a WARN naming such a replica, and
// reports the conflicts for Health, Stats and the pgoutbox.mode_conflicts
// gauge (Conflicts, Observe).
//
// # Inputs
//
// A Config: the pool and the channel, this dispatcher's hello (computed
// once by dispatcher.New from its Config, the mode named as a string), the
// hello interval and the statement bound, the logger and the reporter,
// Trigger (the wake-ups), and the clock.
//
// # Who calls it
//
// The dispatcher: New in dispatcher.New; Run in a goroutine of its own
// beside dispatching, until its quit context ends; Say from the
// listener's state callback once it listens; Notified as the listener's
// notification callback; Conflicts from Health and Stats; Observe while
// Run runs.
//
// # Locks
//
// What it heard is a Set, under its own lock. The Set takes the time as
// an argument and calls nothing: its lock is a leaf, and Forget returns
// the replicas it forgot so that the Greeter logs them once the lock is
// let go (a log handler may call Health, which takes it). What a hello
// costs is bounded (MaxPeers, MaxHelloEvery), since anyone who may NOTIFY
// can send one.
package peers
