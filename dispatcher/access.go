package dispatcher

import "github.com/pgoutbox/pgoutbox/internal/startcheck"

// The start-up checks live in internal/startcheck; their errors are part
// of the dispatcher's API and are declared here.

// ErrMissingPrivilege is matched by the error Start returns when the
// dispatcher's role lacks a privilege on the outbox table, its dead
// letters or its SENT history that its configuration needs (the error is
// a *PrivilegeError).
var ErrMissingPrivilege = startcheck.ErrMissingPrivilege

// ErrIsolation is matched by the error Start returns when the
// dispatcher's connections start their transactions at REPEATABLE READ or
// SERIALIZABLE (default_transaction_isolation set on the server,
// database, role or connection); READ UNCOMMITTED, which PostgreSQL runs
// as READ COMMITTED, is accepted. The dispatcher's statements
// are designed for READ COMMITTED: under SERIALIZABLE a share of its
// claims and completions fail with serialization errors (40001), and
// under REPEATABLE READ a claim can miss rows committed while it runs.
var ErrIsolation = startcheck.ErrIsolation

// PrivilegeError names a privilege on one of the outbox's tables that
// the dispatcher's role lacks, the table, and what in its configuration
// needs it. It matches ErrMissingPrivilege.
type PrivilegeError = startcheck.PrivilegeError
