// Package peers keeps what a dispatcher heard from the other dispatchers
// of its table (Set): their hellos (Hello, sent as Prefix then JSON on
// the table's wake-up channel), which of them use another ordering mode,
// and when each is forgotten (SilentAfter). What a hello costs is bounded
// (MaxPeers, MaxHelloEvery), since anyone who may NOTIFY can send one.
//
// The design of mixed-mode detection is in dispatcher/peers.go, which
// sends this dispatcher's hellos, decides whether a hello's mode
// conflicts, logs, and reads the Set for Health, Stats and the
// pgoutbox.mode_conflicts gauge. The Set takes the time as an argument
// and calls nothing: its lock is a leaf, and Forget returns the replicas
// it forgot so that the caller logs them once the lock is let go (a log
// handler may call Health, which takes it).
package peers
