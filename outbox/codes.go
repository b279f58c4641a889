package outbox

// Code is a stable, machine-readable reason for a failed delivery attempt.
// It is stored in the event row (last_error_code and the attempt log),
// passed to hooks and counted in stats. Codes never change meaning; new ones
// may be added.
type Code string

// The delivery error codes.
const (
	// CodeHandlerError: a local handler returned an error.
	CodeHandlerError Code = "handler_error"
	// CodePublishError: the publisher reported an error for the event.
	CodePublishError Code = "publish_error"
	// CodeTimeout: the handler or publisher did not finish within its
	// timeout, or the handler returned an error matching
	// context.DeadlineExceeded: a deadline of its own, of a middleware's or
	// of a client it called ran out.
	CodeTimeout Code = "timeout"
	// CodeNoHandler was written by earlier versions when a dispatcher that
	// publishes got an empty route for an event with no local handler: the
	// event went straight to FAILED. No dispatcher writes it any more:
	// such an event is released, PENDING and uncharged, for a dispatcher
	// that routes it. Rows FAILED with it before keep it (replay them).
	CodeNoHandler Code = "no_handler"
	// CodeWorkerLost: the worker holding the event stopped renewing its
	// lease (crash, kill, partition) more often than the recovery cap
	// allows, or at-most-once delivery lost its lease.
	CodeWorkerLost Code = "worker_lost"
	// CodeLockLost: a worker found that its lease had been lost before it
	// could record the outcome. Reported to OnError; never stored by the
	// stale worker, since it no longer owns the row.
	CodeLockLost Code = "lock_lost"
	// CodePanic: a handler or publisher panicked; the panic was recovered.
	CodePanic Code = "panic"
	// CodeInvalidEvent: the publisher cannot carry the event as it is (its
	// error matches [ErrInvalidEvent]), for example a field that breaks
	// the header rule in a row written around Emit. Replaying it fails the
	// same way; fix the row or the publisher first.
	CodeInvalidEvent Code = "invalid_event"
	// CodeSnoozeLimit: a handler returned [Snooze] for an event that had
	// already been snoozed as often as the dispatcher allows
	// (dispatcher.Config.MaxSnoozes). The event goes to FAILED; a replay
	// resets its snoozes.
	CodeSnoozeLimit Code = "snooze_limit"
	// CodeOutcomeRefused: the database kept refusing to record the
	// event's outcome (a trigger's exception, a constraint, a missing
	// privilege), so the dispatcher recorded it FAILED instead, without
	// spending an attempt, rather than let its lease expire and run it
	// again. last_error names the outcome that was refused and why; the
	// handler or publish may have succeeded. Fix the cause before a
	// replay.
	CodeOutcomeRefused Code = "outcome_refused"
)
