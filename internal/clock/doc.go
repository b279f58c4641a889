// Package clock is the one clock for the dispatcher's timing decisions:
// lease deadlines, budgets of recovery and retention passes, log repeat
// limits, wake-up cooldowns and idle timers. Every internal service takes
// a Clock (or a now argument computed from one) instead of calling
// time.Now, time.Since, time.Sleep or time.NewTimer itself, so that a test
// can replace the time it reads and no decision hides a second clock.
//
// The dispatcher builds one Clock in New from Config (the test-only
// dispatcher.SetClock replaces Now; nil means the wall clock) and hands it
// to the services it wires. The database clock still decides every due and
// expiry time stored in rows; this clock decides only what the process does
// locally.
//
// A replaced Now moves Now, Since and Until only. Mono and Elapsed, the
// reading of measured durations (how long a handler ran, an overrun, the
// log limiter's windows, a peer's silence, Health's times), read the real
// time (unless a test replaces both, NewAll), and so do timers, tickers,
// sleeps and Serve, since what they wait for (a goroutine going idle, a cooldown
// passing) happens in real time.
package clock
