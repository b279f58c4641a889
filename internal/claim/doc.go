// Package claim is the dispatcher's claimer: the one loop that decides
// when to claim, the claims it runs, and the recovery of expired leases.
// It owns the coordinator goroutine (Claimer.Run), the poll and due
// timers, the claims in flight and their sizes, and what the dispatcher
// claims (its types, fixed when Run starts) with the counts of the events
// of other types left waiting.
//
// # When to claim
//
// Run claims at start, on every poll, on a trigger (Trigger: a manual
// Trigger or a notification) and the follow-ups internal/waker asks for,
// when the held set frees room while a backlog or a wake-up waits, when a
// claim comes back full, after a failed claim's backoff (10ms doubling up
// to PollInterval), and while wake-ups work when the next retry or
// delayed event is due (armDue: the due timer, from lease.Store.NextDue,
// or NextHeadDue when the Scheduler's claims are Ordered). Polls are
// PollInterval apart, stretched up to IdlePollInterval while wake-ups work
// and nothing is claimed. Up to Scheduler.Claimers claims run at once,
// each on its own goroutine and connection. A stop (ctx, or Stop closed)
// is never put off by another ready case; Run returns once no claim is in
// flight, so that every claimed event is in the held set for the drain.
//
// # The room rule and the claim sizes
//
// The dispatcher holds at most Concurrency + Claimers × BatchSize events:
// a claim takes up to BatchSize within the room left, counting the events
// promised to claims in flight, and none while less than half a batch of
// room is left (claimLimit). Which held events count is the Scheduler's
// Room (waiting suspects, up to a batch, take none, except per key). A
// claim that runs out of time halves the claims, full ones grow them back
// (stmtsize.Size). The circuit (internal/circuit) decides the types of
// each claim and its probe while the publisher is out (Plan, DueTypes).
//
// # Recovery
//
// Every RecoverEvery-th poll (or after RecoverEvery plain intervals, or
// at once when the last pass left expired leases behind) a recovery pass
// returns expired leases of every type to PENDING, or FAILED when their
// attempt had started and they were recovered MaxRecoveries times
// already, or under AtMostOnce (reported through FailedFunc with
// ErrWorkerLost). A pass runs statements of up to RecoverBatchSize rows
// while they come back full, for half a poll interval at most, halving
// the limit after one that runs out of time; then it counts the events of
// the types no running dispatcher claims (checkWaiting).
//
// # The Scheduler it asks
//
// The claimer never checks the scheduling mode: it asks its Scheduler
// (internal/run's Mode implements it) how many claims may run, how much
// room the held events take, whether to leave suspects out, whether claims
// are ordered per key, how many events a claim marks started (and the
// handler slots they take, given back when unused), and whether a
// scheduled retry asks for a claim at once. It adds each claimed batch to
// the held set (held.Set.Add) and hands its items to Scheduler.Dispatch.
//
// # Inputs and who calls it
//
// dispatcher.New builds the Claimer from a Config: the held set, the
// lease store, the pool, the reporter, the circuit, the Scheduler, the
// clock (its Now, the lease deadlines' that tests replace: a claim's sent
// time and a recovery pass's budget; its real time, Mono: wake-up
// cooldowns and the recovery cadence), the settings it needs, the signals it selects on
// (Trigger, RetryScheduled, Stop, WakeupsActiveFunc), the dispatcher's
// callbacks (ClaimedTypesFunc, ClaimedFunc for Health, FailedFunc) and
// test hooks. The dispatcher's run calls Run once; Stats reads Waiting.
//
// # Locks
//
// None of its own: only the coordinator goroutine touches the claims and
// the poller; the claim goroutines report through a channel. It takes
// the held set's lock through its methods, and the circuit's.
package claim
