// Package report is how the dispatcher tells what happens: the counters
// behind Stats, the log (repeats rate-limited, see loglimit.go), OnError,
// and the OpenTelemetry metrics and spans (see docs/observability.md).
//
// # What it owns
//
// A Reporter owns its Counters (exported, so that each service adds to
// the ones it counts: r.Counters.Claimed.Add(n)), the log limiter's
// memory of repeated lines, and the instruments created from the
// MeterProvider and TracerProvider it was given. The dispatcher creates
// one Reporter in New and hands it to every service; the public Stats
// struct is filled from Counters by package dispatcher.
//
// It knows no held event: its methods take plain values (an event, its
// type, status, code, durations, errors), so that every service can
// report through it without importing another. What belongs to the
// dispatcher's public API — Outcome and the OnOutcome hook,
// TracingMiddleware — stays there and calls into this package.
//
// # Inputs
//
// Config: the logger, OnError, the table's name and the owner (on every
// line), the providers, the code of a failed publish (for its span), and
// the clock (internal/clock) whose Mono the log limiter and the handler
// durations read: real time, which a test's replaced Now does not freeze.
//
// # Locks
//
// Its methods call the user's hooks (OnError, the logger's handler, the
// providers' SDKs), so no caller may hold a lock of the dispatcher (the
// held set's, or any other) while calling one. Its own locks (the log
// limiter's) are taken last and never held across a hook.
package report
