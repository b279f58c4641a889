// Package emitter writes events into the outbox table inside a transaction
// the caller owns. It is the producing half of pgoutbox: business code
// inserts its own rows and emits its events in one pgx.Tx, so that commit
// persists both and rollback neither. The dispatcher package, in any
// process, later claims the committed rows and delivers them.
//
//	// Once, at start-up: the table is named, never implied.
//	em, err := emitter.New(emitter.Config{Table: outbox.Table{Schema: "public", Name: "outbox_events"}})
//
//	tx, _ := pool.Begin(ctx)
//	defer tx.Rollback(ctx)
//	// ... business writes in tx ...
//	ev, err := outbox.NewJSON("order.created", order)
//	ids, err := em.Emit(ctx, tx, ev)
//	err = tx.Commit(ctx)
//
// # Guarantees
//
//   - Emit never commits, rolls back or otherwise ends the caller's
//     transaction, and starts no goroutine. An [Emitter] holds no connection
//     and no mutable state; one value serves any number of goroutines.
//   - Every event of a call is validated before any SQL is sent. Bad input
//     gives an *outbox.ValidationError naming the event's index and field;
//     nothing is written and an open transaction is still usable. Error
//     texts never quote payload bytes or header values.
//   - A call inserts all its events with one statement, and queues one
//     pg_notify in the same round trip. With a warm statement cache a call
//     is one round trip whatever the number of events; the first call on a
//     connection takes one more, to prepare the statements. Batches of
//     500 events or more, or of 1 MiB of payload or more, go by COPY,
//     two or three round trips, since COPY is faster there and its memory
//     is bounded by the events; a batch with a delay first reads the
//     transaction's now() (one more round trip) and sends each row's due
//     time as that plus its delay, what the INSERT computes.
//   - IDs are the caller's where set, else fresh UUIDv7s, returned in order.
//     next_attempt_at is the database's now() plus Event.Delay: the
//     application's clock is never used.
//
// # Notify
//
// The pg_notify only wakes dispatchers early; they poll anyway, so a lost
// notification delays an event but never loses it. PostgreSQL delivers
// notifications at commit, drops them on rollback and folds identical ones
// of one transaction into one, so a transaction that emits many times sends
// one wake-up. Committing a transaction that notified takes a
// database-wide lock for a moment; systems that commit thousands of such
// transactions per second can set Config.DisableNotify and rely on polling.
//
// # Into a log
//
// With Config.Kind outbox.KindLog the Emitter writes into the relay's
// append-only log (migrations.Config.Kind outbox.KindLog) instead of an
// outbox table: the same validation, IDs, tracing and metrics, the same
// INSERT (one VALUES row for one event, unnested arrays for more; COPY
// from 500 events or 1 MiB) minus
// the due time; the log's defaults fill xid (the transaction's top-level
// id, which bounds the relay's batches; a savepoint's events carry it
// too, and vanish with the savepoint's rollback), seq and created_at, and
// PostgreSQL routes each row to the part of its xid. An event with a
// Delay is refused before anything is sent, with an
// *outbox.ValidationError whose cause is [ErrDelayOnLog]: a log has no
// due times. No pg_notify is sent: the relay's ticker polls, and a notify
// per transaction would serialise commits on the notify queue's lock. The
// kind is declared, not read from the catalog; migrations.Verify and the
// relay's start check catch a table of the other kind. A transaction
// whose xid no part holds (the parts ahead ran out) gets an error saying
// how to add one. A log has no
// primary key: a caller-set ID emitted twice is stored twice (consumers
// dedupe on the ID).
//
// # Failure modes
//
// A nil, committed, rolled-back or aborted transaction gives an
// *outbox.InputError that matches outbox.ErrTxDone (and not
// outbox.ErrInvalidEvent). A ctx already done when Emit is called gives its
// error and sends nothing: the transaction is unchanged and still usable.
// An error from PostgreSQL is returned wrapped: a caller-set ID already in
// the table matching outbox.ErrDuplicateID, a missing table matching
// outbox.ErrMissingTable with how to create it, anything else (a ctx that
// ends while the statement runs) as it is; as with any failed statement
// the transaction is then aborted and can only be rolled back.
package emitter
