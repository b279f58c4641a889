// Package complete is the dispatcher's completer: the one goroutine that
// writes outcomes. It takes the outcomes the held set collected
// (held.Set.TakeOutcomes), writes them in one fenced round trip
// (releases first, then lease.Store.Complete), reports them (counts,
// logs, metrics, the dispatcher's OnOutcome) and lets their events go. It
// also releases, uncharged, the held events that never started (Release:
// at stop, a suspect kept waiting, an event whose earlier call still
// runs, an event no handler or route takes).
//
// # What it owns
//
// The writing of outcomes: group commit (while one write is in flight the
// next outcomes gather), the splitting of a refused write, each outcome's
// retries and when to give up, the fallback write of an outcome the
// database keeps refusing, and the reading back of rows after a lost
// reply. Its state (the size of its writes after statement timeouts) is
// its goroutine's alone; each outcome's write record lives on its
// held.Item (held.Item.Record), which only the completer changes.
//
// # Inputs
//
// A Config: the held set, the lease store and pool, the reporter, the
// wall clock (internal/clock), the keeper's lease-writes lock (a release
// never runs beside this dispatcher's renewals and start marks, see
// internal/keeper), the signal that a retry was scheduled (the
// coordinator's due timer), Health's two callbacks (CompletedFunc,
// SettledFunc), OutcomeFunc (the dispatcher turns each Outcome into its
// public Outcome for Config.OnOutcome), the statement timeout, and how
// outcomes are written (DeleteSent, AtMostOnce, MaxAttempts, Backoff, the
// back-off of unroutable events, and under Ordering PerKey
// SignalAllWrites).
//
// # Who calls it
//
// The dispatcher's run (dispatcher/run.go) makes one Completer per run
// and calls Run on a goroutine of its own until its helpers stop; the held
// set wakes it (held.Set.OutcomesReady). Release may be called from any
// goroutine; Final (whether a failed attempt would be written FAILED) is
// asked by the per-key run pipeline under HeadPolicy SkipFailed.
//
// # Writes that fail
//
// The completer splits a write the database refuses to record the other
// outcomes, retries each refused outcome on its own backoff, and after a
// bounded number of refusals records the event FAILED with code
// outcome_refused (ERROR log, OnError matching outbox.ErrOutcomeRefused,
// OnOutcome FAILED), in a fenced UPDATE of the status, error and lease
// alone that spends no attempt: a write that succeeds where the refused
// one did not (a DELETE without the privilege, a trigger refusing an
// attempt's outcome, a constraint on a column the outcome sets). Why
// FAILED rather than keep the lease until a later release: the database
// gave no sign that it would ever take the outcome, the handler may have
// succeeded (a re-run would deliver it twice) or failed (a re-run would
// meet the same refusal), and letting the lease expire ran the event
// again until recovery made it FAILED with worker_lost, a code that
// blamed a worker that never died. FAILED stops every re-run, names the
// refused outcome and the database's reason in last_error, and waits for
// an operator: fix the cause, then replay (the handler may run again) or
// skip. Only a refused release (of an event that never ran) and a
// fallback write that fails too leave the lease to expire as before.
// The fallback is one statement per refused event, written by the
// completer: a trigger that refuses every outcome of a busy type costs a
// round trip per event until it is fixed, and a fallback whose reply is
// lost is reported as let go although the row may show it FAILED.
//
// # Lost replies
//
// A write whose reply was lost is retried, and when it finds its rows no
// longer held it reads them back: an outcome the row shows was recorded
// under its claim's token (the row's outcome_token, which later claims do
// not overwrite, or its attempt-log entry) is reported as its own, even
// after another replica claimed or completed the event since; one the row
// can no longer tell about as outbox.ErrOutcomeUnknown; outbox.ErrLockLost
// only when the row proves the lease was lost before the write (see
// settleLost and internal/lease, "Lost replies").
//
// # Lock order
//
// It holds no lock of its own. It takes the keeper's lease-writes lock
// around each release statement only, and calls the held set and the
// reporter (which calls the user's hooks) with no lock held.
package complete
