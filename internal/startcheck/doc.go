// Package startcheck holds the dispatcher's start-up checks: before it
// dispatches, Start makes sure the outbox table exists, its schema is one
// this version can work on (migrations.Verify, unless SkipVerify), it has
// the columns the dispatcher uses, Ordering PerKey finds a valid order
// index (building it when missing or INVALID, one build at a time across
// replicas), the dispatcher's role holds every privilege its
// configuration needs, and its transactions start at READ COMMITTED. A
// start that fails one refuses with an error naming the fix
// (PrivilegeError, OrderIndexError, ErrIsolation, …), rather than logging
// the same claim error every poll.
//
// # Inputs
//
// A Config: the dispatcher's pool and lease.Store, the few settings the
// checks read (table, ordering, DeleteSent, KeepSent, RetainFailed,
// SkipVerify, PollInterval), the bound of one statement, the logger and
// clock, and two callbacks: EnsurePartitionsFunc (retention's creation of
// the SENT history's partitions, run once the checks passed) and
// UnverifiedFunc (the start went on without the schema check, for
// Health).
//
// # Who calls it
//
// The dispatcher's startUp, once per Start, under a context that ends
// with Start's or when Stop is called. Run returns when the checks are
// done; the package runs no goroutine and holds no lock.
//
// # Failure modes
//
// A check that runs out of time (statement_timeout, a lock held on the
// table) is skipped or tried once more: statement timeouts must never
// stop progress. A lost connection (a server restarting, a pooler
// dropping its server connection) is tried again for up to ten seconds; a
// connection that could not be made for a wrong configuration is not.
//
// The public dispatcher package declares these errors again as aliases
// (dispatcher.PrivilegeError, dispatcher.ErrMissingPrivilege, …): they
// are the same values and types, so errors.Is and errors.As match either
// name.
package startcheck
