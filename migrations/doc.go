// Package migrations holds the outbox schema as embedded tern migrations and
// the two calls a service makes at start: [Migrate], which applies what is
// missing, and [Verify], which checks that every object the library relies
// on is there as expected and changes nothing.
//
// # Files
//
// The migrations are text/template files named NNN_name.sql, with tern's
// "---- create above / drop below ----" line between the up and down parts.
// [FS] exposes them as they are. The templates use quoted identifiers
// ({{.schema}}, {{.table}}, and one per index and constraint); [Render]
// fills them in for a given [outbox.Table] and returns plain SQL files, one
// up and one down per version, for teams that run goose, golang-migrate or
// atlas instead of tern. docs/schema.md shows how.
//
// # Concurrency
//
// Migrate is safe when many replicas call it at once: it takes a session
// advisory lock keyed by schema and table on the given connection, so one
// caller migrates and the others wait and then find nothing to do. Session
// advisory locks need a direct connection: PgBouncer in transaction mode
// cannot hold them. Several outboxes (different schema or table names) in
// one database migrate independently, each with its own version table named
// <table>_schema_version.
//
// A migration that alters the outbox table needs an ACCESS EXCLUSIVE lock,
// and while it waits for one every Emit and claim waits behind it. It
// therefore sets a lock_timeout of 2s, and Migrate retries it a few times
// before giving up (see [Migrate]); docs/operations.md describes rolling
// upgrades.
//
// # Startup safety
//
// Verify compares the catalog with what this version of the library needs
// (tables, columns with their types, constraints, indexes with their
// definitions) and reports every difference in one [*VerifyError]. It never
// creates, alters or drops anything, so it is safe to run with a read-only
// role before the dispatcher starts.
package migrations
