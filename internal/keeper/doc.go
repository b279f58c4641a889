// Package keeper keeps the dispatcher's leases while it holds events: the
// heartbeat renews every held lease about every third of the lease
// duration (heartbeat.go), the marker writes the start marks that handler
// slots wait for (mark.go), and before each beat it watches the handler
// and publish calls that run past their timeout (overrun.go: the WARN and
// the count; the held set stops renewing them).
//
// # What it owns
//
// The one rule "this dispatcher's renewals, start marks and releases never
// run at once": they skip rows locked elsewhere and must not find each
// other's. The Keeper owns that lock (LeaseWrites): its renewals and marks
// take it around each statement, and the completer (internal/complete)
// takes it around each release. Under the same lock it owns the adaptive
// size of those statements (stmtsize.Size of refs, shrunk by statement
// timeouts, see stmtsize.WriteRefs).
//
// # Inputs
//
// A Config: the held set (what to renew, mark and watch), the lease store
// and pool, the reporter, the logger and names of the overrun WARN, the
// wall clock and the clock of local lease deadlines (internal/clock), the
// lease duration, the statement timeout, the delivery mode of marks, and
// the dispatcher's never-cancelled context for its statements.
//
// # Who calls it
//
// The dispatcher's run (dispatcher/run.go) makes one Keeper per run, gives
// its LeaseWrites to the completer, and calls Run on a goroutine of its
// own until its helpers stop. The run pipeline does not call it: it asks
// the held set for marks (held.Set.QueueMarks) and waits there
// (Item.Marking, held.Set.Startable); the held set wakes the marker
// (held.Set.MarksWanted).
//
// # Lock order
//
// LeaseWrites is never held while held.Set.mu or the dispatcher's mu is
// taken, nor taken while they are held: the Keeper calls the held set
// before and after a statement, never around it.
package keeper
