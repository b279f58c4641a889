// Package purge retires finished outbox rows (schema version 11): the
// SENT history's time partitions, the dead letters, and the strays still
// in the outbox table. It is the one place that SQL lives: admin.Purge
// (and so outboxctl purge), the dispatcher's retention job and
// migrations.Migrate call it.
//
// # The history's partitions
//
// The SENT history is partitioned by range of sent_at. EnsurePartitions
// creates its time partitions ahead of need, of a length (Span) that
// follows the retention; RetireHistory drops those whose whole range is
// older than the retention, so a SENT row is kept for between the
// retention and the retention plus one span. A row whose partition does
// not exist lands in the default partition (normally empty); it is
// deleted in batches (Store.Delete with StatusSent), the one mass delete
// path of the history.
//
// # The batch statement
//
// One statement per batch (dead letters by failed_at through the dead
// time index; the default partition's rows by sent_at): it locks at most
// Limit due rows with FOR UPDATE SKIP LOCKED, oldest first, and deletes
// them. Rows another transaction holds are skipped, not waited for; rows
// deleted or changed meanwhile are simply not there: neither is an
// error. The cut-off is the database's now() minus OlderThan.
//
// # One deleter at a time
//
// With Params.Exclusive the batch first takes a transaction-level advisory
// lock keyed by the table's name (pg_try_advisory_xact_lock, which does
// not wait) and deletes nothing when another batch holds it. The lock
// ends with the statement's own transaction, so it works through
// transaction-mode poolers, where a session lock would stay behind on a
// pooled server connection; and a deleter that dies holds nothing. Two
// retention jobs therefore never run a batch at the same time; a job that
// finds the lock taken ends its pass and tries again at its next one.
// The partition work (EnsurePartitions, RetireHistory) is serialized the
// same way by a lock of its own, waited for at most LockTimeout.
//
// # The sweep
//
// Sweep moves the strays (SENT and FAILED rows in the outbox table, from
// an upgrade or a dispatcher of schema version 9 still running) to the
// history and the dead letters.
package purge
