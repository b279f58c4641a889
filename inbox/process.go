package inbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/pgvalue"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// MaxConsumerLen is the longest consumer name, in bytes.
const MaxConsumerLen = 255

// maxAttempts bounds the insert-then-look-up loop of Record, which repeats
// only when a purge removes the conflicting row between the two.
const maxAttempts = 3

// WorkFunc is a consumer's work for one event. It runs inside the
// consumer's transaction tx and must do all its database writes through tx,
// so that they commit or roll back together with the inbox record.
type WorkFunc func(ctx context.Context, tx pgx.Tx) error

// Process runs work for event e at most once per consumer in committed
// state. Inside tx it records (consumer, e.ID, hash of e.Type and
// e.Payload) and then:
//
//   - the first time, runs work(ctx, tx) and returns a Result with
//     Duplicate false;
//   - when the consumer already committed e.ID with the same content,
//     does not run work and returns Result{Duplicate: true};
//   - when it committed e.ID with a different type or payload, does not run
//     work and returns a [*ConflictError] (errors.Is [ErrContentMismatch]).
//
// Process never commits or rolls back tx: the record and work's writes
// become durable together when the caller commits, and both vanish when it
// rolls back. When work returns an error, Process removes the record again
// (so a caller that commits anyway leaves the event unprocessed, not
// silently skipped) and returns work's error unchanged; the caller should
// roll back.
//
// When another transaction has recorded the same (consumer, e.ID) but not
// finished, Process waits for it: if it commits, this call reports a
// duplicate or conflict; if it rolls back, this call records the event and
// runs work. Under REPEATABLE READ or SERIALIZABLE that race ends instead
// in a serialization failure (SQLSTATE 40001), which the caller retries like
// any other.
//
// Invalid input (nil tx, nil work, bad consumer name, zero e.ID) gives an
// [*outbox.InputError] before anything is sent; a finished or aborted tx gives one
// too, matching [outbox.ErrTxDone]. No error carries payload bytes.
func (ib *Inbox) Process(ctx context.Context, tx pgx.Tx, consumer string, e outbox.Event, work WorkFunc) (Result, error) {
	if work == nil {
		return Result{}, &outbox.InputError{Field: "work", Reason: "is nil"}
	}
	res, err := ib.Record(ctx, tx, consumer, e)
	if err != nil || res.Duplicate {
		return res, err
	}
	if err := work(ctx, tx); err != nil {
		// Best effort: in an aborted tx this fails, and so will commit.
		_, _ = tx.Exec(ctx, ib.sql.forget, consumer, pgvalue.UUID(e.ID))
		return Result{}, err
	}
	return res, nil
}

// Record is Process without work, for consumers that prefer to branch
// themselves: it records (consumer, e.ID, content hash) inside tx and
// reports whether the event is new (Duplicate false: do the work in tx,
// then commit), a duplicate (skip it), or a conflict ([*ConflictError]).
// The waiting, errors and guarantees are those of [Inbox.Process]; a
// caller whose work fails after Record must roll back tx.
func (ib *Inbox) Record(ctx context.Context, tx pgx.Tx, consumer string, e outbox.Event) (Result, error) {
	if err := validate(tx, consumer, e.ID); err != nil {
		return Result{}, err
	}
	hash := contentHash(e)
	for range maxAttempts {
		res, done, err := ib.record(ctx, tx, consumer, e.ID, hash)
		if done || err != nil {
			return res, err
		}
	}
	return Result{}, fmt.Errorf("pgoutbox: inbox: record event %s: the conflicting row vanished %d times (concurrent purge?)", e.ID, maxAttempts)
}

// record tries the insert once and, on conflict, compares with the stored
// row. done is false when that row was gone by the time it was read.
func (ib *Inbox) record(ctx context.Context, tx pgx.Tx, consumer string, id uuid.UUID, hash []byte) (res Result, done bool, err error) {
	err = tx.QueryRow(ctx, ib.sql.insert, consumer, pgvalue.UUID(id), hash).Scan(&res.ProcessedAt)
	if err == nil {
		return res, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Result{}, false, ib.queryError("record", id, err)
	}
	// A new statement, so in READ COMMITTED a fresh snapshot: it sees the
	// row of the transaction the insert waited for.
	var stored []byte
	err = tx.QueryRow(ctx, ib.sql.lookup, consumer, pgvalue.UUID(id)).Scan(&stored, &res.ProcessedAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Result{}, false, nil
	case err != nil:
		return Result{}, false, ib.queryError("look up", id, err)
	case !bytes.Equal(stored, hash):
		return Result{}, true, &ConflictError{Consumer: consumer, EventID: id}
	}
	res.Duplicate = true
	return res, true, nil
}

// contentHash is SHA-256 over the length of e.Type, e.Type and e.Payload,
// so that no type/payload split collides with another.
func contentHash(e outbox.Event) []byte {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(e.Type)))
	h.Write(n[:])
	h.Write([]byte(e.Type))
	h.Write(e.Payload)
	return h.Sum(nil)
}

// validate checks the arguments Record needs.
func validate(tx pgx.Tx, consumer string, id uuid.UUID) error {
	if pgerr.IsNil(tx) {
		return &outbox.InputError{Field: "tx", Reason: "is nil", Err: outbox.ErrTxDone}
	}
	if reason := consumerProblem(consumer); reason != "" {
		return &outbox.InputError{Field: "consumer", Reason: reason}
	}
	if id == uuid.Nil {
		return &outbox.InputError{Field: "event.ID", Reason: "is zero"}
	}
	return nil
}

// consumerProblem says what is wrong with a consumer name, or "".
func consumerProblem(name string) string {
	if name == "" {
		return "is empty"
	}
	return pgvalue.TextProblem(name, MaxConsumerLen)
}

// queryError reports an unusable tx as an InputError, a missing inbox
// table as outbox.ErrMissingTable with a hint (a missing table of a
// trigger's is not), and wraps anything else; every text keeps the
// database's message.
func (ib *Inbox) queryError(op string, id uuid.UUID, err error) error {
	if txErr := pgerr.TxUnusable(err); txErr != nil {
		return txErr
	}
	if pgerr.OwnMissingTable(err) {
		return errtext.WrapHint(errtext.WrapAs(outbox.ErrMissingTable, err, ""), "create it with inbox.Migrate",
			"inbox %s: %s event %s", ib.table, op, id)
	}
	return errtext.Wrap(err, "inbox %s: %s event %s", ib.table, op, id)
}
