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
// one database keep separate versions, each in its own version table named
// <table>_schema_version. tern takes a lock of its own, one key for every
// tern migration in the database (so migrations run one at a time), and
// Migrate takes that one too before tern does. It waits at most
// [Config].LockTimeout for the two, then returns a
// *[LockError] naming the backend that holds the lock (a
// lock left behind by an idle pooled connection is ended with
// pg_terminate_backend).
//
// A migration that alters the outbox table needs an ACCESS EXCLUSIVE lock,
// and while it waits for one every Emit and claim waits behind it. It
// therefore sets a lock_timeout of 2s, and Migrate retries it a few times
// before giving up (see [Migrate]); docs/operations.md describes rolling
// upgrades.
//
// # The per-key order index
//
// Since version 12 the outbox table's order index exists only where
// [Config].KeyOrder asks for it: dispatchers with Ordering PerKey need it,
// and every keyed event pays an index entry for it at insert, claim and
// retry. With the option Migrate builds a missing one concurrently after
// the migrations; without it Migrate leaves one that exists alone (drop
// it with DROP INDEX CONCURRENTLY). [Render] writes version 12 for either
// choice; [Verify] accepts the table with or without the index.
//
// # Privileges
//
// Migrate creates the schema only when it is missing, so a migrator that
// owns its schema (or has USAGE and CREATE on it) needs no privilege on
// the database. [RenderGrants] writes the least-privilege grants for the
// migrator and the roles that produce, dispatch and operate.
//
// # The log kind
//
// [Config].Kind outbox.KindLog gives the table the relay's schema instead
// of the dispatcher's (docs/relay-design.md): an append-only log
// partitioned by RANGE of the writing transaction's id (xid8), with no
// default partition and 16 parts created ahead, one index on xid; its
// ticks, the ticker's lease row, the consumer groups' cursors, parked
// keys and parked events; and SECURITY DEFINER functions (<log>_part_add,
// and those later versions add) through which roles that do not own the
// log manage its parts. Its templates are [LogFS], versioned on their own
// ([LatestLog]) in the log's <table>_schema_version, so an outbox and a
// log live side by side under different names. [Migrate], [Render],
// [Version], [Verify] and [RenderGrants] take the kind from the Config;
// KeyOrder, the SENT history and the sweep are the outbox's only.
//
// # Startup safety
//
// Verify compares the catalog with what this version of the library needs
// (tables, columns with their types, constraints, indexes with their
// definitions) and reports every difference in one [*VerifyError]. It never
// creates, alters or drops anything, so it is safe to run with a read-only
// role before the dispatcher starts.
package migrations
