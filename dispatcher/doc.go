// Package dispatcher delivers committed outbox events: it claims them in
// batches, runs local handlers and/or a broker publisher, and records each
// outcome (SENT, a retry at a database-clock time, or FAILED) under a
// token-fenced, heartbeat-renewed lease. Any number of dispatchers, in any
// number of processes, may serve one table; FOR UPDATE SKIP LOCKED keeps
// them from ever holding the same event at once.
//
// # The loop
//
//	poll ticker ─┐
//	Trigger() ───┼─▶ coordinator ──claims (≤ BatchSize each, Claimers at once)──▶ handlers ─▶ publisher
//	free slot ───┘        │                                                │
//	                      └─ every RecoverEvery-th poll: recover expired   ▼
//	                                             completer (one round trip per write)
//	heartbeat (every LeaseDuration/3): renew every held lease in one round trip
//
// The dispatcher holds at most Concurrency + Claimers × BatchSize events
// (and, after a crash, up to a batch more suspects waiting for their turn,
// see internal/run/suspect.go):
// while Concurrency handlers run, up to Claimers claims (two by default) run
// at once on their own connections, and their batches wait for handler
// slots, keeping their leases, so that claiming, dispatching and recording
// outcomes overlap.
//
// Triggers coalesce: however many arrive while a cycle runs, one more cycle
// follows. A cycle keeps claiming while batches come back full and slots are
// free, so a backlog drains at full speed; polling still runs when idle,
// because retries become due on their own and a missed wake-up must only
// delay an event, never lose it.
//
// # Outcomes
//
// An event succeeds when its local handler (if any) and the publisher (if
// the router gives it a destination) succeed. Its handler is the one
// registered for its type with Handle, else Config.DefaultHandler (the
// catch-all, off by default). It fails with
//
//	handler_error, publish_error  the handler or publisher returned an error
//	timeout                       HandlerTimeout or PublishTimeout passed, or
//	                              the handler's error matches
//	                              context.DeadlineExceeded (a timeout of its own,
//	                              or a middleware's)
//	panic                         the handler or publisher panicked (recovered)
//	invalid_event                 the publisher cannot carry the event as it is
//	                              (its error matches outbox.ErrInvalidEvent)
//	snooze_limit                  the handler snoozed once more than MaxSnoozes
//	                              allows (FAILED at once)
//	outcome_refused               the database refused to record the outcome
//	                              five times (FAILED, no attempt spent; see
//	                              Writes that fail)
//
// A failure is retried at the database's now() + Backoff.Delay(attempt)
// until MaxAttempts, unless it is wrapped by outbox.Permanent, is
// snooze_limit, or Delivery is AtMostOnce: those become FAILED (the dead
// letter).
//
// An event it claimed and cannot deliver, whose route is empty (or that
// it does not publish) and whose type has no handler, is not attempted
// and never FAILED: it is released unstarted and uncharged, due again
// after a short back-off, for a replica that routes it (a rolling deploy
// that adds a route; see internal/run/unroutable.go). It is counted
// (Stats.Unroutable) and its type logged at WARN. no_handler is no
// longer written; rows FAILED with it by earlier versions keep it. Outcomes are written by one completer
// goroutine that batches whatever has finished since its last write.
//
// A handler that returns outbox.Snooze(d) gives its event back: PENDING
// again, due at the database's now() + d, without spending an attempt
// (the row's snoozes column counts it instead). The snooze goes through
// the same batched, fenced write as a retry.
//
// # Which events it claims
//
// A dispatcher claims only what it can deliver: its handlers' types and,
// with a Publisher, PublishTypes; a DefaultHandler, or a Publisher
// without PublishTypes, makes it claim every type (ClaimedTypes). Events
// of other types stay PENDING for the dispatchers that handle them; those
// no running dispatcher claims are counted (Stats.WaitingUnhandled, once
// due for over a minute) and logged, never dead-lettered. See internal/claim/types.go.
// A catch-all publisher that claims an event its RouteFunc does not route
// releases it the same way (Stats.Unroutable; see internal/run/unroutable.go).
//
// # Hooks and middleware
//
// Config.OnOutcome receives one Outcome for every outcome recorded: SENT,
// PENDING (a retry or a snooze) or FAILED, with the code, the error, the
// next attempt time, the queue wait and the run duration. A struct, so
// that fields can be added without breaking anyone.
//
// Handler middleware (outbox.Middleware) wraps handlers: Config.Middleware
// for every handler, outermost first, then the middleware given to Handle
// for one type. Chains are built once, when a handler is registered, so an
// empty chain costs nothing per event.
//
// # Metrics and traces
//
// The dispatcher reports through the OpenTelemetry API alone, to
// Config.MeterProvider and Config.TracerProvider (by default the global
// providers, which record nothing until the application installs one):
// counters of claimed, sent, retried, failed (by code), lock lost and
// recovered events, handler and publish durations, the start delay of
// first attempts, and backlog gauges sampled from the due index at most
// once per BacklogSampleInterval while Run runs. Each handler call and
// each Publish call runs in a span whose parent is the span that emitted
// the event. See docs/observability.md.
//
// # Leases
//
// Each claim holds its events under a fresh token until lease_until
// (database clock). The heartbeat renews all held leases every third of
// LeaseDuration. The dispatcher trusts a lease only until a local deadline
// (the time the claim or last renewal was sent + 4/5 of LeaseDuration): past
// it, or when a renewal comes back without an event, the handler's context
// is cancelled and the outcome is not written. If the outcome of a lost
// lease reaches the database anyway, the fenced statement changes nothing.
// Either way OnError receives an error matching outbox.ErrLockLost and
// OnOutcome is not called.
//
// A handler (or publish) that ignores its cancelled context keeps running:
// past its timeout it is logged at WARN, counted (Stats.Overruns,
// Health.Overrunning) and no longer renewed, and while it runs this
// dispatcher's claims leave its event out (under Ordering PerKey, whose
// claims cannot, a claim that takes it lets it go unstarted, uncharged,
// its lease left to expire), so that another replica delivers it within
// about HandlerTimeout + LeaseDuration + a recovery cycle; this process
// never runs the event again while the call runs, and the call's late
// outcome is fenced off (see overrun.go).
//
// # Recovery
//
// Every RecoverEvery-th poll cycle a recovery pass returns expired leases
// (a crashed or partitioned worker) to PENDING without spending retry
// budget, RecoverBatchSize rows per statement. A pass keeps going while
// its statements come back full, for up to half a PollInterval (the
// dispatcher's clock); while expired leases remain, the next poll comes a
// tenth of a PollInterval later and runs another pass, so claims run in
// between and a mass crash's leases come back at nearly the statement's
// speed. Only an event whose attempt had started counts a recovery, and
// one recovered more than MaxRecoveries times becomes FAILED with
// worker_lost. Each attempt is marked started in the database before its
// handler or publish starts (see internal/run/slots.go), so the events a dying worker
// had claimed ahead come back as they were. An event recovered before (a
// suspect) is marked right before its handler, never by a claim, and runs
// alone among suspects (see internal/run/suspect.go), so that a poison event does not
// take the events claimed with it down with it; suspects waiting for
// their turn do not hold up the events due behind them.
//
// # Writes that fail
//
// An outcome the database refuses to record (a DELETE without the
// privilege, a trigger's exception, a constraint on a column the outcome
// sets) is retried on its own backoff while the other outcomes of the
// same write are recorded; after five refusals the event is recorded
// FAILED with code outcome_refused (ERROR log, OnError matching
// outbox.ErrOutcomeRefused, OnOutcome FAILED), spending no attempt, and
// waits for an operator: fix the cause, then replay (the handler may run
// again) or skip. A write whose reply was lost is retried and, when it
// finds its rows no longer held, reads them back: an outcome recorded
// under its claim's token is reported as its own, even after another
// replica claimed or completed the event since; one the row can no longer
// tell about as outbox.ErrOutcomeUnknown; outbox.ErrLockLost only when the
// row proves the lease was lost before the write. internal/complete
// documents the design (why FAILED rather than letting the lease expire,
// the fallback write, lost replies).
//
// # Starting
//
// Start runs the start-up checks and returns their error, if any, before
// anything is dispatched: the table exists, its schema matches what this
// version needs (migrations.Verify, unless Config.SkipVerify), with
// Ordering PerKey the table has a valid per-key order index
// (ErrNoOrderIndex: migrations.Config.KeyOrder keeps it), the role
// holds the privileges the configuration needs (SELECT, UPDATE, and
// DELETE for DeleteSent and retention: ErrMissingPrivilege), its
// transactions start at READ COMMITTED, the isolation every statement is
// designed for (ErrIsolation: a SERIALIZABLE default made claims and
// completions fail with serialization errors), and in WakeupRequired mode
// notifications arrive. It then dispatches in the
// background until its context ends or Stop is called. Run does the same
// and blocks until the end. A dispatcher runs once: Start or Run on one
// that is starting or running returns ErrRunning, on one that is stopping
// or stopped ErrStopped (Run returns nil after a Stop that came before
// dispatching began: a clean stop). In WakeupAuto mode the wake-up probe
// runs beside dispatching, which polls until notifications are proven to
// arrive.
//
//	new ──Start/Run──▶ starting ──checks pass──▶ running ──Stop/ctx──▶ stopping ──drained──▶ stopped
//	 ▲                    │                                                                    ▲
//	 └──checks fail───────┘                                   Stop before a start ─────────────┘
//
// Health reports the state, the last successful claim and outcome write,
// the failures in a row since, the listener's state, and the replicas of
// the table heard with another ordering mode (see peers.go);
// Health.Healthy judges it for readiness and liveness probes.
//
// # Stopping
//
// Once ctx ends or Stop is called, the dispatcher stops claiming, returns
// claimed events whose handler has not started to PENDING, waits up to
// DrainTimeout for running handlers, cancels the remaining ones (their
// events return to PENDING without spending an attempt), writes every
// outcome and ends. Stop waits for the same result and returns it, as Run
// does; Done is closed then and Err holds it. Stop is idempotent.
//
// Writing the outcomes may take a bounded while past DrainTimeout. A write
// that fails is retried after 100ms, then after waits doubling up to 2s.
// An outcome the database refuses five times (an SQL error such as a
// trigger's exception, a constraint or a missing privilege) is recorded
// FAILED with code outcome_refused (see Writes that fail), with an ERROR
// log and an OnError error matching outbox.ErrOutcomeRefused: the other
// outcomes of the same write are recorded. Any other outcome is let go after 20 failed
// writes, or at the first failure past its local deadline (the third, when
// an earlier write of it may have taken effect: only reading the row back
// can tell, and the retry does). Each write is
// bounded by min(LeaseDuration/2, 30s). So the margin is about 1.5s of
// waiting plus five writes for a refused outcome, and at most 31s of
// waiting plus 20 writes in all, besides the time handlers that ignore
// their cancelled context take.
//
// # Where to read
//
// docs/architecture.md draws the services, their inputs, the walk of one
// event and the lock order. This package keeps the public API and wires
// the services, each a package under internal/ with a doc.go of its own:
//
//	dispatcher.go  Dispatcher, New (the mode is chosen here, once), Handle, Trigger, Stats,
//	               Start, Run, Stop; config.go the Config with its defaults and ranges
//	run.go         dispatching: the start-up checks, the services started and stopped, the drain
//	life.go        where the dispatcher is in its life (State): start, Stop, Done, Err
//	claim.go       the claimer's wiring, and ClaimedTypes
//	complete.go    the completer's wiring, and OnOutcome's Outcome (outcome.go) made of each
//	keeper.go      the keeper's wiring: renewals, start marks, overruns
//	health.go      what Health reports; overrun.go DrainTimeoutError and Health's overrun limit
//	report.go      the reporter's wiring, and recovery's FAILED events to OnOutcome
//	listen.go      the LISTEN connection's wiring: notifications into triggers
//	retention.go, peers.go, metrics.go, circuit.go, trace.go  the other services' wiring
//
// One event's walk, package by package, in the order it happens:
//
//	internal/claim     when to claim (claimer.go) and the claim (claims.go): the events
//	                   join the held set and the mode's Dispatch takes the batch
//	internal/run       the run of a batch in the scheduling mode (work.go; claimorder.go,
//	                   ordered.go and suspect.go for the other modes and suspects): the
//	                   handler slot, the start mark, the handler, the publish, Finish
//	internal/complete  the completer: take the finished outcomes, write them, report, let go
//
// Beside the walk:
//
//	internal/held      the held set: every event held and every change of its state,
//	                   under its own lock (its doc.go documents the lock order)
//	internal/keeper    the heartbeat renewing every held lease, the start marks, overruns
//	internal/lease     every statement that moves a row in or out of PROCESSING
//	internal/report    counters, logs, OnError, metrics and spans
//	internal/wakeup, internal/peers, internal/retention, internal/backlog,
//	internal/startcheck  the LISTEN connection, the hellos, retention, the backlog
//	                   gauges, the start-up checks
//
// Leaves the services share: internal/clock (the one clock), waker,
// stmtsize, workers, circuit, loglimit, tally.
package dispatcher
