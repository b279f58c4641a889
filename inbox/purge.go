package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// MaxBatchSize is the largest batchSize Purge accepts.
const MaxBatchSize = 10_000

// Purge deletes the records processed more than olderThan ago, by the
// database clock, and returns how many it deleted. It works in batches: each
// DELETE removes at most batchSize rows, oldest first, skipping rows another
// purge has locked, and Purge repeats it until a batch comes back short or
// ctx ends. On a pool or a connection each batch commits on its own, so
// locks stay short; in a pgx.Tx every batch belongs to that transaction.
// The cut-off is taken once at the start, so rows that age past it while
// Purge runs wait for the next call.
//
// Retention must exceed the longest time after which the same event can
// still arrive: the broker's redelivery and dedupe window, the outbox's
// retry horizon, and any replay an operator may run. A record purged
// before its last redelivery lets that redelivery run the work again.
//
// db must not be nil, olderThan must be positive and batchSize 1 to
// [MaxBatchSize]; otherwise Purge returns an [*outbox.InputError] and deletes
// nothing. After an error the count says how many rows earlier batches
// deleted.
func (ib *Inbox) Purge(ctx context.Context, db DB, olderThan time.Duration, batchSize int) (int64, error) {
	if pgerr.IsNil(db) {
		return 0, &outbox.InputError{Field: "db", Reason: "is nil"}
	}
	if olderThan <= 0 {
		return 0, &outbox.InputError{Field: "olderThan", Reason: fmt.Sprintf("is %s, must be positive", olderThan)}
	}
	if batchSize < 1 || batchSize > MaxBatchSize {
		return 0, &outbox.InputError{Field: "batchSize", Reason: fmt.Sprintf("is %d, must be 1 to %d", batchSize, MaxBatchSize)}
	}
	var cutoff time.Time
	if err := db.QueryRow(ctx, ib.sql.cutoff, olderThan.Microseconds()).Scan(&cutoff); err != nil {
		return 0, errtext.Wrap(err, "inbox: purge %s: cut-off", ib.table)
	}
	var total int64
	for {
		n, err := ib.purgeBatch(ctx, db, cutoff, batchSize)
		total += n
		if err != nil || n < int64(batchSize) {
			return total, err
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}

// purgeBatch deletes at most batchSize rows processed before cutoff.
func (ib *Inbox) purgeBatch(ctx context.Context, db DB, cutoff time.Time, batchSize int) (int64, error) {
	tag, err := db.Exec(ctx, ib.sql.purge, cutoff, batchSize)
	if err != nil {
		return 0, errtext.Wrap(err, "inbox: purge %s", ib.table)
	}
	return tag.RowsAffected(), nil
}
