package lease

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
)

// MovedColumns are the columns a move names when it inserts a row into
// the dead letters or the SENT history (every column of the outbox
// table, which both share): a role granted INSERT on some columns only
// needs INSERT on each of these.
var MovedColumns = []string{
	"id", "seq", "event_type", "aggregate_type", "aggregate_id", "partition_key", "idempotency_key",
	"content_type", "payload", "headers", "status", "attempts", "recoveries", "next_attempt_at",
	"lock_token", "lock_owner", "locked_at", "lease_until", "heartbeat_at", "last_error_code", "last_error",
	"attempt_log", "created_at", "sent_at", "failed_at", "started_at", "snoozes", "skipped_at", "outcome_token",
}

// FinishedReadColumns are the columns of the dead letters and the SENT
// history that the dispatcher may read there (a move's RETURNING list,
// the look-up of a lost reply, the head test of ordered claims): those
// of ReadColumns but ctid.
var FinishedReadColumns = func() []string {
	var cols []string
	for _, c := range ReadColumns {
		if c != "ctid" {
			cols = append(cols, c)
		}
	}
	return cols
}()

// TableAccess is what the connected role may do on one of the tables a
// finished event moves to.
type TableAccess struct {
	// Table is the table's quoted, schema-qualified name.
	Table string
	// SelectMissing lists, in FinishedReadColumns' order, the columns the
	// role may not select (none when it may select them all).
	SelectMissing []string
	// InsertMissing lists, in MovedColumns' order, the columns the role
	// may not insert into (none when it may insert every one).
	InsertMissing []string
	// Delete is true when the role holds DELETE on the table.
	Delete bool
	// Update is true when the role may update some column of the table,
	// which locking its rows FOR UPDATE needs.
	Update bool
}

// RetainColumns are the columns of the history's default partition that
// the retention job reads (ctid, which it deletes by, sent_at and seq).
var RetainColumns = []string{"ctid", "sent_at", "seq"}

// FinishedAccess reads the connected role's privileges on the outbox's
// dead letters, its SENT history and the history's default partition, in
// one statement that reads no row. Privileges on the partitioned history
// are those the dispatcher's outcomes need: they reach its partitions
// through it. The retention job reaches the default partition directly
// (its SelectMissing is of RetainColumns; InsertMissing is not read).
func (s *Store) FinishedAccess(ctx context.Context, db DB) (dead, sent, sentDefault TableAccess, err error) {
	names, err := sqlname.For(s.table)
	if err != nil {
		return dead, sent, sentDefault, err
	}
	dead.Table, sent.Table = names.Dead, names.Sent
	sentDefault.Table = pgx.Identifier{names.Table.Schema, names.Object(sqlname.SuffixSentDefault)}.Sanitize()
	rows, err := db.Query(ctx, `SELECT `+
		lackingOn(1, 4, "SELECT")+`, `+lackingOn(1, 5, "INSERT")+`, has_table_privilege($1::text, 'DELETE'),
		has_any_column_privilege($1::text, 'UPDATE'), `+
		lackingOn(2, 4, "SELECT")+`, `+lackingOn(2, 5, "INSERT")+`, has_table_privilege($2::text, 'DELETE'),
		has_any_column_privilege($2::text, 'UPDATE'), `+
		lackingOn(3, 6, "SELECT")+`, has_table_privilege($3::text, 'DELETE'), has_any_column_privilege($3::text, 'UPDATE')`,
		names.Dead, names.Sent, sentDefault.Table, FinishedReadColumns, MovedColumns, RetainColumns)
	if err == nil {
		_, err = pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (struct{}, error) {
			return struct{}{}, row.Scan(&dead.SelectMissing, &dead.InsertMissing, &dead.Delete, &dead.Update,
				&sent.SelectMissing, &sent.InsertMissing, &sent.Delete, &sent.Update,
				&sentDefault.SelectMissing, &sentDefault.Delete, &sentDefault.Update)
		})
	}
	if err != nil {
		return dead, sent, sentDefault, fmt.Errorf("pgoutbox: check access: %w", err)
	}
	for _, a := range []*TableAccess{&dead, &sent, &sentDefault} {
		a.SelectMissing, a.InsertMissing = orNil(a.SelectMissing), orNil(a.InsertMissing)
	}
	return dead, sent, sentDefault, nil
}

// lackingOn is an expression listing, in order, the columns of parameter
// $param (a text array) on which the role lacks privilege on the table
// named by parameter $table.
func lackingOn(table, param int, privilege string) string {
	return fmt.Sprintf(`array(SELECT c FROM unnest($%d::text[]) WITH ORDINALITY AS w (c, i)
			WHERE NOT has_column_privilege($%d::text, c, '%s') ORDER BY i)`, param, table, privilege)
}
