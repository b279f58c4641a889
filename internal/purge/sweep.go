package purge

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
)

// Execer runs a statement: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// SweepBatch is the batch Migrate sweeps in: 10,000 strays a transaction.
const SweepBatch = 10_000

// sweepSQL moves up to $1 strays of status from the outbox table to
// dest, oldest (seq) first, through the stray index, skipping rows other
// transactions hold; stamp is the finish column, set to now() when a row
// lacks it; conflict ends the INSERT (sqlname.ReplaceDead for the dead
// letters).
func sweepSQL(names sqlname.Names, status, dest, stamp, conflict string) string {
	cols := strings.Join(sqlname.Columns, ", ")
	sel := strings.Replace(cols, stamp, fmt.Sprintf("coalesce(%[1]s, now()) AS %[1]s", stamp), 1)
	return fmt.Sprintf(`WITH m AS (
	DELETE FROM %[1]s AS o WHERE o.id = ANY (ARRAY(
		SELECT id FROM %[1]s WHERE status = '%[2]s' ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED))
	AND o.status = '%[2]s'
	RETURNING %[4]s)
INSERT INTO %[3]s (%[4]s) SELECT %[5]s FROM m %[6]s`, names.Qualified, status, dest, cols, sel, conflict)
}

// Sweep moves up to limit strays, rows of the outbox table whose status
// is SENT or FAILED (left by an upgrade from schema version 9, or written
// by a dispatcher of version 9 still running), to the history (SENT) and
// the dead letters (FAILED), and returns how many it moved. They are
// found through the stray index in seq order, locked FOR UPDATE SKIP
// LOCKED (a row another transaction holds waits for the next sweep); one
// statement per kind, SENT first, each atomic. A SENT row goes to the
// history's partition of its sent_at (the default partition when none
// covers it: run EnsurePartitions first). A FAILED stray whose id is a
// dead letter already replaces it (sqlname.ReplaceDead), as the
// dispatcher's moves do: refused, it would stop every sweep.
func Sweep(ctx context.Context, db Execer, names sqlname.Names, limit int) (moved int, err error) {
	for _, kind := range [...]struct{ status, dest, stamp, conflict string }{
		{"SENT", names.Sent, "sent_at", ""}, {"FAILED", names.Dead, "failed_at", sqlname.ReplaceDead},
	} {
		if moved >= limit {
			break
		}
		tag, err := db.Exec(ctx, sweepSQL(names, kind.status, kind.dest, kind.stamp, kind.conflict), limit-moved)
		if err != nil {
			return moved, errtext.Wrap(err, "purge: sweep %s rows of %s", kind.status, names.Table)
		}
		moved += int(tag.RowsAffected())
	}
	return moved, nil
}

// OldestStray returns the earliest sent_at of the SENT strays (reading
// every stray), and false when no SENT stray has one.
func OldestStray(ctx context.Context, db Querier, names sqlname.Names) (time.Time, bool, error) {
	var oldest *time.Time
	err := db.QueryRow(ctx, fmt.Sprintf(`SELECT min(sent_at) FROM %s WHERE status IN ('SENT', 'FAILED') AND status = 'SENT'`,
		names.Qualified)).Scan(&oldest)
	if err != nil || oldest == nil {
		return time.Time{}, false, err
	}
	return *oldest, true, nil
}
