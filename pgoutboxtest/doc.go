// Package pgoutboxtest helps users test their own code that emits outbox
// events: assertions that read the outbox table ("this transaction emitted
// that event"), and a dispatcher run that stops once the table is idle.
// It is to pgoutbox what rivertest is to River. The conformance suite for
// publishers is another package, outbox/outboxtest.
//
// # Assertions
//
//	RequireEmitted      exactly one row matches a Want; returns its event
//	RequireManyEmitted  the rows of the wanted types match the Wants in emit order
//	RequireNotEmitted   no row matches a Want
//
// They read every event of the outbox wherever it is: still to deliver in
// the outbox table, FAILED in its dead letters (<table>_dead) or SENT in
// its history (<table>_sent), so that a Want with a Status matches an
// event a dispatcher has finished. A SENT event deleted by DeleteSent or
// retention is gone.
//
// They read through a [DB]: pass the caller's pgx.Tx to check what it
// wrote before it commits (a test can then roll back and leave nothing
// behind), or a pool or connection to check committed rows. A [Want] names
// the fields an event must have; fields left zero match anything, so a
// Want can gain fields without changing what existing tests assert.
//
// On a mismatch they fail the test with the Want and the latest rows of
// the table (sequence number, ID, type, status, and a payload excerpt of
// at most 64 bytes), each with the fields that differ from the Want.
// Payloads are the test's own data; the excerpt keeps failures short.
//
// # Dispatching until idle
//
// [DispatchUntilIdle] runs a dispatcher with the caller's Config and
// handlers until no event is due or in flight, stops it cleanly and
// returns the table's per-status counts and the dispatcher's Stats. Idle is
// read from the table, not from hooks: no row is PROCESSING and no PENDING
// row of a type the dispatcher claims is due by the database clock. Events
// due later (a Delay, a retry's backoff) stay PENDING and count as idle.
// A due event that no handler matched (the dispatcher leaves it PENDING
// for another dispatcher) fails the test, naming its type, and so does
// one the dispatcher could not route (no destination from RouteFunc, no
// handler: left PENDING too); FAILED events are the caller's to check.
//
// # Failing a test
//
// Every helper takes a [TB], the part of testing.TB it uses, so that a
// *testing.T, *testing.B or *testing.F fits, and so do the helpers' own
// tests, which pass a fake to prove that each assertion fails when it
// should. A helper that fails calls TB.Fatalf once, after it has stopped
// everything it started.
package pgoutboxtest
