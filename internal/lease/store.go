package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// DB is what the statements run on: a *pgxpool.Pool, *pgx.Conn or pgx.Tx.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Store runs the lease statements against one outbox table. It holds no
// connection and no state beyond the SQL text; it is safe for concurrent
// use.
type Store struct {
	table outbox.Table
	names sqlname.Names
	sql   statements
	// ordered and orderedTyped are the ordered claims of every type and
	// of the types of a text array.
	ordered, orderedTyped orderedForms
}

// New returns a Store for the table, after validating its names.
func New(table outbox.Table) (*Store, error) {
	names, err := sqlname.For(table)
	if err != nil {
		return nil, err
	}
	return &Store{table: names.Table, names: names, sql: buildStatements(names),
		ordered:      buildOrdered(names.Qualified, names.Dead, false),
		orderedTyped: buildOrdered(names.Qualified, names.Dead, true)}, nil
}

// usedColumns are the columns the statements read or write, in the
// outbox table and in its dead letters and SENT history, which have the
// same (sqlname.Columns). A table migrated by an older version lacks some of
// them.
var usedColumns = strings.Join(sqlname.Columns, ", ")

// CheckColumns reports, as an error matching outbox.ErrSchemaMismatch,
// a table that lacks a column the statements use (one migrated by an
// older version), or whose dead letters or SENT history table is missing
// or lacks one (schema version 10), so that a dispatcher started before
// the migration fails at start rather than at every claim. It reads no
// row, in one statement per table. A role that may not select every used
// column passes unchecked: it may need none of the missing ones (the
// statements only write some, WrittenColumns), and Access names those it
// needs.
func (s *Store) CheckColumns(ctx context.Context, db DB) error {
	for i, t := range []string{s.names.Qualified, s.names.Dead, s.names.Sent} {
		_, err := db.Exec(ctx, `SELECT `+usedColumns+` FROM `+t+` LIMIT 0`)
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == pgerr.InsufficientPrivilege:
		case errors.As(err, &pgErr) && (pgErr.Code == pgerr.UndefinedColumn || i > 0 && pgErr.Code == pgerr.UndefinedTable):
			return fmt.Errorf("%w: table %s: %s (run migrations.Migrate with this version)",
				outbox.ErrSchemaMismatch, s.table, pgErr.Message)
		case err != nil:
			return fmt.Errorf("pgoutbox: check columns: %w", err)
		}
	}
	return nil
}

// Table returns the (defaulted) table the store works on.
func (s *Store) Table() outbox.Table { return s.table }

// micros converts a duration to whole microseconds for the database.
func micros(d time.Duration) int64 { return d.Microseconds() }

// WrittenColumns are the columns of the outbox table that the
// dispatcher's statements UPDATE (claims, renewals, releases, retries
// and snoozes, recovery). A role granted UPDATE on some columns only
// needs UPDATE on each of these; docs/operations.md gives the grant. A
// success and a FAILED outcome DELETE the row and INSERT it into the
// SENT history or the dead letters (MovedColumns) instead: sent_at is no
// longer written in the outbox table (schema version 10).
var WrittenColumns = []string{
	"status", "attempts", "recoveries", "snoozes", "next_attempt_at", "lock_token", "lock_owner",
	"locked_at", "lease_until", "heartbeat_at", "started_at", "failed_at",
	"last_error_code", "last_error", "attempt_log", "outcome_token",
}

// ReadColumns are the columns of the outbox table that the dispatcher's
// statements read (claims' RETURNING lists, read-backs, recovery,
// next-due, outcome checks, and the moves, which read every column they
// carry over). A role granted SELECT on some columns only needs SELECT on
// each of these; heartbeat_at the statements only write (a move clears
// it). No statement reads ctid since the typed claim walks the due index
// (schema version 11).
var ReadColumns = []string{
	"id", "seq", "event_type", "aggregate_type", "aggregate_id", "partition_key", "idempotency_key",
	"content_type", "payload", "headers", "status", "attempts", "recoveries", "snoozes",
	"next_attempt_at", "lock_token", "lock_owner", "locked_at", "lease_until", "started_at",
	"skipped_at", "last_error_code", "last_error", "attempt_log", "outcome_token", "created_at",
	"sent_at", "failed_at",
}

// MovedColumns are the columns that the moves INSERT into the dead
// letters (a final failure, a recovery past the cap, a refused outcome)
// and into the SENT history (a success, unless DeleteSent): every column.
// A role granted INSERT on some columns of those tables needs INSERT on
// each of these, and UPDATE and SELECT on each of the dead letters' (a
// move replaces the dead letter of the same id, sqlname.ReplaceDead). The moves also DELETE from the outbox table.
var MovedColumns = slices.Clone(sqlname.Columns)

// DeadReadColumns are the columns of the dead letters that the
// dispatcher's statements read: every column, since a move that replaces
// the dead letter of the same id (INSERT … ON CONFLICT DO UPDATE, see
// sqlname.ReplaceDead) reads each one it sets; besides, the rows a move
// inserted (RETURNING), an outcome read back after a lost reply, and the
// dead letters that block their key in an ordered claim.
var DeadReadColumns = slices.Clone(sqlname.Columns)

// SentReadColumns are the columns of the SENT history that the
// dispatcher's statements read: the id of a moved row (RETURNING), and an
// outcome read back after a lost reply.
var SentReadColumns = []string{
	"id", "status", "attempts", "next_attempt_at", "lock_token", "attempt_log", "outcome_token",
}

// Access is what the connected role may do on the table, and the
// isolation level its transactions start at.
type Access struct {
	// Select is true when the role may select every column in
	// ReadColumns (granted on the table or column by column).
	Select bool
	// SelectMissing lists, in ReadColumns' order, the read columns the
	// role may not select (none when Select is true).
	SelectMissing []string
	// Delete is true when the role holds DELETE on the table.
	Delete bool
	// Update is true when the role may update every column in
	// WrittenColumns (granted on the table or column by column).
	Update bool
	// UpdateMissing lists, in WrittenColumns' order, the written columns
	// the role may not update (none when Update is true).
	UpdateMissing []string
	// Dead and Sent are the role's privileges on the dead letters and
	// the SENT history: INSERT on MovedColumns and SELECT on
	// DeadReadColumns, SentReadColumns.
	Dead, Sent TableAccess
	// Isolation is the level a transaction of this connection starts at
	// (default_transaction_isolation, as the server, database, role or
	// connection set it): "read committed", "repeatable read",
	// "serializable" or "read uncommitted".
	Isolation string
}

// TableAccess is what the connected role may do on the dead letters or
// the SENT history.
type TableAccess struct {
	// Insert is true when the role may insert every column of
	// MovedColumns (granted on the table or column by column);
	// InsertMissing lists, in MovedColumns' order, those it may not.
	Insert        bool
	InsertMissing []string
	// Select is true when the role may select every column the
	// statements read of the table (DeadReadColumns, SentReadColumns);
	// SelectMissing lists, in that order, those it may not.
	Select        bool
	SelectMissing []string
	// Update (dead letters only) is true when the role may update every
	// column of MovedColumns: a move replaces the dead letter of the same
	// id (INSERT … ON CONFLICT DO UPDATE); UpdateMissing lists, in
	// MovedColumns' order, those it may not.
	Update        bool
	UpdateMissing []string
}

// Access reads the connected role's privileges on the table and the
// isolation its transactions start at, in one statement. It reads no row.
// SELECT and UPDATE count when granted on the table or on each column the
// dispatcher reads (ReadColumns) or writes (WrittenColumns): a column
// grant made for an earlier schema version lacks the columns added since
// (version 9's outcome_token).
func (s *Store) Access(ctx context.Context, db DB) (Access, error) {
	rows, err := db.Query(ctx, `SELECT `+lackingColumns(1, 2, "SELECT")+`, `+lackingColumns(1, 3, "UPDATE")+`,
		has_table_privilege($1::text, 'DELETE'), current_setting('transaction_isolation'),
		`+lackingColumns(4, 6, "INSERT")+`, `+lackingColumns(4, 7, "SELECT")+`, `+lackingColumns(4, 6, "UPDATE")+`,
		`+lackingColumns(5, 6, "INSERT")+`, `+lackingColumns(5, 8, "SELECT"),
		s.names.Qualified, ReadColumns, WrittenColumns, s.names.Dead, s.names.Sent, MovedColumns, DeadReadColumns, SentReadColumns)
	if err != nil {
		return Access{}, fmt.Errorf("pgoutbox: check access: %w", err)
	}
	a, err := pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (Access, error) {
		var a Access
		err := row.Scan(&a.SelectMissing, &a.UpdateMissing, &a.Delete, &a.Isolation,
			&a.Dead.InsertMissing, &a.Dead.SelectMissing, &a.Dead.UpdateMissing, &a.Sent.InsertMissing, &a.Sent.SelectMissing)
		return a, err
	})
	if err != nil {
		return Access{}, fmt.Errorf("pgoutbox: check access: %w", err)
	}
	a.Select, a.SelectMissing = len(a.SelectMissing) == 0, orNil(a.SelectMissing)
	a.Update, a.UpdateMissing = len(a.UpdateMissing) == 0, orNil(a.UpdateMissing)
	for _, t := range []*TableAccess{&a.Dead, &a.Sent} {
		t.Insert, t.InsertMissing = len(t.InsertMissing) == 0, orNil(t.InsertMissing)
		t.Select, t.SelectMissing = len(t.SelectMissing) == 0, orNil(t.SelectMissing)
	}
	a.Dead.Update, a.Dead.UpdateMissing = len(a.Dead.UpdateMissing) == 0, orNil(a.Dead.UpdateMissing)
	return a, nil
}

// lackingColumns is an expression listing, in order, the columns of
// parameter $param (a text array) on which the role lacks one of the
// privileges on the table $table.
func lackingColumns(table, param int, privileges ...string) string {
	held := make([]string, len(privileges))
	for i, p := range privileges {
		held[i] = fmt.Sprintf(`has_column_privilege($%d::text, c, '%s')`, table, p)
	}
	return fmt.Sprintf(`array(SELECT c FROM unnest($%d::text[]) WITH ORDINALITY AS w (c, i)
			WHERE NOT (%s) ORDER BY i)`, param, strings.Join(held, " AND "))
}

// orNil returns nil for an empty list.
func orNil(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}
