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
	// Status is outbox.StatusSent or outbox.StatusFailed; the caller
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
	// starts in the finished index where the previous one ended rather
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

// finishedAt is the expression the finished index is built on: when the
// row became SENT or FAILED.
const finishedAt = `coalesce(sent_at, failed_at)`

// New returns the statements for the table in names.
func New(names sqlname.Names) *Store {
	t := names.Qualified
	return &Store{
		lockName:    "pgoutbox.retention:" + names.Table.String(),
		sent:        deleteSQL(t, "SENT", "true"),
		failed:      deleteSQL(t, "FAILED", "true"),
		sentExcl:    deleteSQL(t, "SENT", "pg_try_advisory_xact_lock(hashtextextended($4, 0))"),
		failedExcl:  deleteSQL(t, "FAILED", "pg_try_advisory_xact_lock(hashtextextended($4, 0))"),
		sentCount:   countSQL(t, "SENT"),
		failedCount: countSQL(t, "FAILED"),
	}
}

// due selects the rows of status that finished before the cut-off ($1 is
// OlderThan in microseconds), in the order of the finished index.
func due(status string) string {
	return fmt.Sprintf(`status = '%s' AND %s < now() - $1::bigint * interval '1 microsecond'`, status, finishedAt)
}

// deleteSQL is one batch: turn decides whether it may run (the advisory
// lock, or true). The sub-select that locks the rows is gated on it, so a
// batch that did not get its turn reads no row. $3 is Params.After
// (-infinity for none), a lower bound of the same index column, so that
// the scan starts there. "id = ANY(ARRAY(…))"
// rather than "id IN (SELECT … LIMIT n)", which may be planned as a join
// that re-runs the sub-select and touches more than n rows.
func deleteSQL(table, status, turn string) string {
	return fmt.Sprintf(`WITH turn AS (SELECT %[4]s AS got),
gone AS (
	DELETE FROM %[1]s AS o WHERE o.id = ANY (ARRAY(
		SELECT id FROM %[1]s WHERE (SELECT got FROM turn) AND %[3]s AND %[5]s >= $3::timestamptz
		ORDER BY %[5]s LIMIT $2 FOR UPDATE SKIP LOCKED))
	AND o.status = '%[2]s'
	RETURNING %[5]s AS finished)
SELECT (SELECT got FROM turn), count(*), max(finished) FROM gone`, table, status, due(status), turn, finishedAt)
}

// countSQL counts, without locking, up to $2 rows a batch would delete.
// Ordered like the batch, so that it too walks the finished index: with
// no order, a LIMIT makes a sequential scan look cheap, and when few rows
// are due it reads the whole table.
func countSQL(table, status string) string {
	return fmt.Sprintf(`SELECT count(*) FROM (SELECT 1 FROM %s WHERE %s ORDER BY %s LIMIT $2) AS d`, table, due(status), finishedAt)
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
