// Package purge deletes finished outbox rows (SENT or FAILED) that
// finished before a cut-off, in bounded batches. It is the one place that
// SQL lives: admin.Purge (and so outboxctl purge) and the dispatcher's
// retention job both call it.
//
// # The statement
//
// One statement per batch: it locks at most Limit due rows of one status
// with FOR UPDATE SKIP LOCKED, oldest first, in a sub-select that walks
// the finished index ((status, coalesce(sent_at, failed_at)) WHERE status
// IN ('SENT', 'FAILED'), migration 004), and deletes them through the
// primary key. Rows another transaction holds are skipped, not waited
// for; rows deleted or changed meanwhile are simply not there: neither is
// an error. The cut-off is the database's now() minus OlderThan, and age
// is the time the row became SENT (sent_at) or FAILED (failed_at).
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
package purge
