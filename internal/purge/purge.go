package purge

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Querier is what a batch runs on: a *pgxpool.Pool, a *pgx.Conn or a
// pgx.Tx.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Params choose one batch of rows to delete.
type Params struct {
	// Status is outbox.StatusSent (the rows of the history's default
	// partition) or outbox.StatusFailed (the dead letters); the caller
	// checks it (Delete and Count panic on any other).
	Status outbox.Status
	// OlderThan keeps rows that finished less than this long ago
	// (database clock).
	OlderThan time.Duration
	// Limit is the most rows the batch deletes (or counts).
	Limit int
	// Exclusive makes the batch run only while no other exclusive batch
	// on the table runs (see the package doc).
	Exclusive bool
	// After, when set, skips the rows that finished before it: a drain
	// passes the Result.Last of its previous batch, so that each batch
	// starts in the index where the previous one ended rather
	// than at its oldest entry, past the dead entries of the rows already
	// deleted (which stay in the index while an old snapshot holds the
	// vacuum horizon back). The zero time starts at the oldest row.
	After time.Time
}

// Result is what one batch did.
type Result struct {
	// Deleted is how many rows the batch deleted.
	Deleted int64
	// Skipped is true when Params.Exclusive was set and another batch held
	// the table's retention lock: the batch deleted nothing.
	Skipped bool
	// Last is when the last row the batch deleted finished (the greatest
	// coalesce(sent_at, failed_at)); the zero time when it deleted none.
	Last time.Time
}

// Store holds the statements for one outbox table.
type Store struct {
	lockName               string
	sent, failed           string // the batch
	sentExcl, failedExcl   string // the batch under the retention lock
	sentCount, failedCount string // how many a batch would delete now
}

// source is where the rows of one status are deleted: the table, the
// column that identifies a row there, and when the row finished.
type source struct{ table, key, finished string }

// New returns the statements for the table in names: FAILED rows are
// deleted from the dead letters (by failed_at, through the dead time
// index), SENT rows from the history's default partition only (by
// sent_at: the partition is normally empty and has no index on it; the
// time partitions go whole, see RetireHistory).
func New(names sqlname.Names) *Store {
	sent := source{table: sentDefault(names), key: "ctid", finished: "sent_at"}
	failed := source{table: names.Dead, key: "id", finished: "failed_at"}
	const excl = "pg_try_advisory_xact_lock(hashtextextended($4, 0))"
	return &Store{
		lockName:    "pgoutbox.retention:" + names.Table.String(),
		sent:        deleteSQL(sent, "true"),
		failed:      deleteSQL(failed, "true"),
		sentExcl:    deleteSQL(sent, excl),
		failedExcl:  deleteSQL(failed, excl),
		sentCount:   countSQL(sent),
		failedCount: countSQL(failed),
	}
}

// due selects the rows that finished before the cut-off ($1 is OlderThan
// in microseconds).
func due(src source) string {
	return fmt.Sprintf(`%s < now() - $1::bigint * interval '1 microsecond'`, src.finished)
}

// deleteSQL is one batch: turn decides whether it may run (the advisory
// lock, or true). The sub-select that locks the rows is gated on it, so a
// batch that did not get its turn reads no row. $3 is Params.After
// (-infinity for none), a lower bound of the same column, so that the
// scan starts there. "key = ANY(ARRAY(…))" rather than
// "key IN (SELECT … LIMIT n)", which may be planned as a join that
// re-runs the sub-select and touches more than n rows.
func deleteSQL(src source, turn string) string {
	return fmt.Sprintf(`WITH turn AS (SELECT %[3]s AS got),
gone AS (
	DELETE FROM %[1]s AS o WHERE o.%[5]s = ANY (ARRAY(
		SELECT %[5]s FROM %[1]s WHERE (SELECT got FROM turn) AND %[2]s AND %[4]s >= $3::timestamptz
		ORDER BY %[4]s LIMIT $2 FOR UPDATE SKIP LOCKED))
	RETURNING %[4]s AS finished)
SELECT (SELECT got FROM turn), count(*), max(finished) FROM gone`, src.table, due(src), turn, src.finished, src.key)
}

// countSQL counts, without locking, up to $2 rows a batch would delete.
// Ordered like the batch, so that it walks the same index: with no
// order, a LIMIT makes a sequential scan look cheap, and when few rows
// are due it reads the whole table.
func countSQL(src source) string {
	return fmt.Sprintf(`SELECT count(*) FROM (SELECT 1 FROM %s WHERE %s ORDER BY %s LIMIT $2) AS d`, src.table, due(src), src.finished)
}

// Delete runs one batch and reports how many rows it deleted.
func (s *Store) Delete(ctx context.Context, db Querier, p Params) (Result, error) {
	after := pgtype.Timestamptz{Time: p.After, Valid: true}
	if p.After.IsZero() {
		after = pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	}
	args := []any{p.OlderThan.Microseconds(), p.Limit, after}
	stmt := s.pick(p.Status, s.sent, s.failed)
	if p.Exclusive {
		stmt = s.pick(p.Status, s.sentExcl, s.failedExcl)
		args = append(args, s.lockName)
	}
	var got bool
	var n int64
	var last pgtype.Timestamptz
	if err := db.QueryRow(ctx, stmt, args...).Scan(&got, &n, &last); err != nil {
		return Result{}, err
	}
	return Result{Deleted: n, Skipped: !got, Last: last.Time}, nil
}

// Count returns how many rows (at most p.Limit) a batch would delete now,
// read without locks. p.Exclusive is ignored.
func (s *Store) Count(ctx context.Context, db Querier, p Params) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, s.pick(p.Status, s.sentCount, s.failedCount), p.OlderThan.Microseconds(), p.Limit).Scan(&n)
	return n, err
}

func (s *Store) pick(status outbox.Status, sent, failed string) string {
	switch status {
	case outbox.StatusSent:
		return sent
	case outbox.StatusFailed:
		return failed
	}
	panic("pgoutbox: purge: status " + string(status) + " is not SENT or FAILED")
}
