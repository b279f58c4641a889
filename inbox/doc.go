// Package inbox is the consumer's half of exactly-once effects. The outbox
// delivers every event at least once: a dispatcher that crashes after
// publishing but before recording SENT publishes again, a broker redelivers
// what was not acknowledged, an operator replays FAILED events. The inbox
// turns that into effectively-once effects for work a consumer does in its
// own PostgreSQL database: inside the consumer's transaction it records
// (consumer, event ID, content hash) under a unique key and runs the work
// only when the record is new.
//
//	handler(msg):
//	  BEGIN
//	    Process(tx, "billing", event, work)
//	      INSERT record ON CONFLICT DO NOTHING ──new──▶ work(tx) ──▶ Result{}
//	                    │
//	                    └─conflict─▶ same hash? ──yes──▶ Result{Duplicate: true}
//	                                            └─no───▶ *ConflictError
//	  COMMIT (record and work together), then ack the message
//
// # Invariants
//
//   - For each (consumer, event ID), work runs to a committed end at most
//     once: the record and work's writes commit or roll back together, and
//     the primary key lets only one committed record exist.
//   - A redelivery with the same ID, type and payload is reported as a
//     duplicate and its work is not run; one with the same ID but another
//     type or payload is refused with a [*ConflictError] and its work is not
//     run. Headers, content type and attempt number are not part of the
//     content: brokers and tracing change them between deliveries.
//   - Consumers are independent: each name has its own records.
//   - Process never commits, rolls back or retries the caller's
//     transaction, and no error it returns contains payload bytes.
//   - Time (processed_at and Purge's cut-off) is the database clock.
//
// # Concurrency
//
// Two transactions recording the same (consumer, event ID) at once: the
// second INSERT waits for the first transaction. If it commits, the second
// sees a duplicate (or conflict); if it rolls back, the second records the
// event and runs the work. Under READ COMMITTED this needs no retry; under
// REPEATABLE READ or SERIALIZABLE the second gets a serialization failure
// (SQLSTATE 40001) and retries its transaction. A consumer that processes
// several events per transaction holds each record's row lock until it
// commits, so two such transactions taking the same IDs in different orders
// can deadlock (PostgreSQL aborts one with 40P01); process events in a
// stable order or one per transaction.
//
// # Failure modes
//
//   - Crash after commit, before the broker ack: the broker redelivers,
//     Process reports a duplicate, the handler acks. This is the case the
//     package exists for.
//   - Crash or error before commit: the record and work vanish; the
//     redelivery does the work.
//   - Work fails: Process removes the record and returns the error; the
//     caller rolls back and nacks, and the redelivery tries again.
//   - Effects outside the transaction (HTTP calls, e-mail, another
//     database) are not covered: they can happen twice, or happen and then
//     be rolled back. Make them idempotent on the event ID or route them
//     through an outbox of their own.
//   - A record purged before the last redelivery of its event lets that
//     redelivery run the work again; see [Inbox.Purge] for retention.
//
// # Schema
//
// One table, <schema>.<table> (default public.outbox_inbox), created by
// [Migrate] from the embedded templates in [FS], with its own version table
// <table>_schema_version. [Verify] checks it at start-up without changing
// anything. docs/inbox.md is the user guide.
package inbox
