package testdb

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// AllRows returns a parenthesised subquery that reads every event of
// table wherever it lives: the outbox table (PENDING and PROCESSING, and
// strays), its dead letters (FAILED) and its SENT history, with the
// sqlname.Columns the three share and a column "place" saying which one holds the
// row ("T", "dead" or "sent"). Give it an alias:
//
//	SELECT status, count(*) FROM `+testdb.AllRows(table)+` AS e GROUP BY status
//
// It panics on an invalid table (a test's mistake).
func AllRows(table outbox.Table) string {
	names, err := sqlname.For(table)
	if err != nil {
		panic("testdb: " + err.Error())
	}
	cols := strings.Join(sqlname.Columns, ", ")
	return "(SELECT " + cols + ", 'T' AS place FROM " + names.Qualified +
		" UNION ALL SELECT " + cols + ", 'dead' FROM " + names.Dead +
		" UNION ALL SELECT " + cols + ", 'sent' FROM " + names.Sent + ")"
}

// StatusOf returns the status of the event id of table, read in the
// outbox table, then its dead letters, then its SENT history (the first
// that holds it), or "" when none holds it (deleted, as DeleteSent and
// retention do).
func StatusOf(ctx context.Context, db Querier, table outbox.Table, id uuid.UUID) (string, error) {
	var status string
	err := db.QueryRow(ctx, `SELECT status FROM `+AllRows(table)+` AS e WHERE id = $1
		ORDER BY CASE place WHEN 'T' THEN 0 WHEN 'dead' THEN 1 ELSE 2 END LIMIT 1`, id).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return status, err
}

// CountStatus returns how many events of table have status, counted in
// the outbox table, its dead letters and its SENT history together.
func CountStatus(ctx context.Context, db Querier, table outbox.Table, status outbox.Status) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT count(*) FROM `+AllRows(table)+` AS e WHERE status = $1`, string(status)).Scan(&n)
	return n, err
}

// MoveToDead makes the event id of the test's outbox FAILED with
// last_error_code code (none when empty) as a FAILED outcome leaves it
// since schema version 10: its row moves from the outbox table to the
// dead letters, with failed_at now() and no lease. The test fails when
// the outbox table does not hold the event.
func (db *DB) MoveToDead(tb testing.TB, id uuid.UUID, code string) {
	tb.Helper()
	names, err := sqlname.For(db.Table())
	if err != nil {
		tb.Fatalf("testdb: move to dead: %v", err)
	}
	set := map[string]string{
		"status": "'FAILED'::text", "failed_at": "now()", "lease_until": "NULL::timestamptz", "heartbeat_at": "NULL::timestamptz",
		"last_error_code": "coalesce(nullif($2, ''), o.last_error_code)",
	}
	exprs := make([]string, len(sqlname.Columns))
	for i, c := range sqlname.Columns {
		exprs[i] = "o." + c
		if e, ok := set[c]; ok {
			exprs[i] = e + " AS " + c
		}
	}
	cols := strings.Join(sqlname.Columns, ", ")
	tag, err := db.Pool.Exec(context.Background(), `WITH m AS (DELETE FROM `+names.Qualified+` AS o WHERE o.id = $1
		RETURNING `+strings.Join(exprs, ", ")+`)
		INSERT INTO `+names.Dead+` (`+cols+`) SELECT `+cols+` FROM m`, id, code)
	if err != nil || tag.RowsAffected() != 1 {
		tb.Fatalf("testdb: move %s to dead: %v (%d rows)", id, err, tag.RowsAffected())
	}
}
