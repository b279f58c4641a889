// Package held is the set of events this process holds: claimed, and not
// yet let go. It is the one place where an event's state in this process
// changes, under one lock.
//
// The dispatcher makes one Set (NewSet: its clock, whose Now is the
// local clock of lease deadlines and whose Mono measures start times, run
// times and overruns, and the lease duration) and hands it to its services: the
// claim adds each claim's events (Add); the run pipeline begins them,
// finishes them and gives back the ones it does not run (Begin, Finish,
// GiveBack, ReleaseQueued, CallStarts); the marker marks their starts
// (QueueMarks, TakeMarks, Marked); the completer takes the outcomes and
// lets them go (TakeOutcomes, WriteFailed, MayHaveWritten, Remove); the
// heartbeat renews their leases (Live, StillLive, Renewed); recovery,
// overrun warnings, Health and Stop read it. The set signals the completer
// (OutcomesReady), the claimer (Freed) and the marker (MarksWanted) on
// channels it owns.
//
// # States
//
// Every change of an event's state is one of the Set's methods, named for
// the transition:
//
//	Add ─▶ Begin ─▶ Finish ─▶ TakeOutcomes ─▶ (written) Remove
//	 │       │        │            │  └─ WriteFailed ─▶ back in line, or let go
//	 │       └────────┴── lost ────┴─▶ let go (Renewed, loseExpired, Begin)
//	 └─ Unstarted (at stop: Completing, the completer releases them) ─▶ Remove
//
// An Item's State is Queued (claimed, handler not started), Running
// (handler or publisher running), Finished (its Result waits for the
// completer) or Completing (its outcome is being written).
//
// # Locks
//
// Set.mu is a leaf: while it is held nothing else is locked, no statement
// runs and nothing outside this package is called (no hook, handler or
// OnError); the only calls out are cancel functions of the set's own
// contexts and non-blocking sends on its signal channels, and the judge
// the completer gives WriteFailed, which only reads and updates the item.
// Whoever needs another lock as well (Dispatcher.mu, the keeper's
// lease-writes lock, the log limiter) takes it before or after, never
// around, a held-set call, so no order between them arises.
//
// The package boundary keeps that discipline: an Item's fields that the
// lock guards are unexported, changed only by the Set's methods; what
// other packages read of an Item is either fixed when the claim is added
// (exported fields: Event, Batch, Key, Waited, Suspect, BehindCall,
// OlderDone), owned by the run pipeline (Dest, HasSlot), or read through a
// method that says when the read is ordered after the write (Context,
// StartedAt, Ran, Result, Marked, MaybeWritten) or that takes the lock
// (Set.Lease).
package held
