// Package run is the dispatcher's handler and publish pipeline: it runs
// each claimed batch, in the dispatcher's handler slots, calls the
// handlers (in their middleware) and the publisher, and hands each
// event's result to the held set, which the completer writes.
//
// # What it owns
//
// The handler slots (Concurrency tokens) and the running average of
// handler durations that decides how many events a claim marks started
// (slots.go); the suspect turn (suspect.go); the order of batches in
// claim order (claimorder.go); the judging of each publish call for the
// publisher's circuit (circuit.go; internal/circuit keeps the circuit's
// state); the counts of unroutable events (unroutable.go).
//
// # Inputs and who calls it
//
// dispatcher.New chooses the scheduling mode once (NewMode) and builds the
// Runner (New) from a Config: the held set, the reporter, the circuit, the
// clock, the publisher and its routing, the few settings that decide how
// a call runs and ends, and two callbacks: Release (the completer's
// release of unstarted items) and FinalFailure (whether a failure is
// final). The dispatcher's run calls Start with the workers and the
// registered handlers, fixed from then on. The claimer asks the mode
// (its Scheduler: Claimers, Room, SkipSuspects, Ordered, StartsFor,
// ReleaseSlots, WakeOnRetry) how to claim, adds each claimed batch to the
// held set and hands it to the mode's Dispatch.
//
// # The modes
//
//   - unordered: runBatch runs a batch's handlers concurrently on workers,
//     publishes its publish-only events at once and the handled ones in
//     one call after their handlers (work.go);
//   - in claim order (Concurrency 1 without per-key ordering): one claim
//     at a time, each batch waits for the one before, and runs a segment
//     at a time through runBatch (claimorder.go);
//   - per key (Ordering PerKey): claims take each key's run from its
//     head, and runOrdered runs a batch in waves, one step of each key
//     per wave, stopping a key at its first event that does not succeed
//     (ordered.go).
//
// The modes differ also in what await does with an item behind an older
// call still running (released, or per key removed with its lease left
// to expire), in what a claim marks and which slots it takes (StartsFor),
// and in whether waiting suspects take room (Room, SkipSuspects).
//
// # The walk of a batch
//
//	claim (internal/claim) → held.Set.Add → Mode.Dispatch
//	  → runBatch / runInTurn+runInSegments / runOrdered+runWave
//	  → unroutable: released uncharged (releaseUnroutable)
//	  → suspects: runSuspect, one at a time (takeSuspectTurn)
//	  → the others: a handler slot (acquireSlot), await, the start mark
//	    (markStarted), held.Set.Begin, the handler (callHandler)
//	  → publish (heldBack while the circuit is open; judgePublish)
//	  → held.Set.Finish: the completer writes the outcome
//
// # Locks
//
// The runner has no lock of its own but batchQueue.mu, a leaf around a
// slice; the slots and the suspect turn are channels. It calls the held
// set (whose lock is a leaf) and the reporter without holding either.
package run
