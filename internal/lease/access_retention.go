package lease

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
)

// RetainColumns are the columns of the SENT history's default partition
// that the retention job reads there: ctid, which it deletes by, sent_at
// and seq.
var RetainColumns = []string{"ctid", "sent_at", "seq"}

// RetainAccess is what the connected role may do for the retention job,
// which deletes old dead letters and old rows of the SENT history's
// default partition (reached directly, not through the history) in
// batches it locks FOR UPDATE, which needs UPDATE on some column.
type RetainAccess struct {
	// DeadDelete is DELETE on the dead letters. (UPDATE on them, which
	// the job's FOR UPDATE needs too, every dispatcher needs anyway: see
	// TableAccess.Update.)
	DeadDelete bool
	// DefaultSelectMissing lists, in RetainColumns' order, the columns of
	// the default partition the role may not select.
	DefaultSelectMissing []string
	// DefaultUpdate and DefaultDelete are UPDATE (on some column) and
	// DELETE on the default partition.
	DefaultUpdate, DefaultDelete bool
	// SentAdd and SentDrop are EXECUTE on the history's partition
	// functions (<table>_sent_add, <table>_sent_drop), which create and
	// drop its time partitions.
	SentAdd, SentDrop bool
}

// RetainAccess reads the connected role's privileges for the retention
// job, in one statement that reads no row.
func (s *Store) RetainAccess(ctx context.Context, db DB) (RetainAccess, error) {
	sentDefault := pgx.Identifier{s.names.Table.Schema, s.names.Object(sqlname.SuffixSentDefault)}.Sanitize()
	rows, err := db.Query(ctx, `SELECT has_table_privilege($1::text, 'DELETE'),
		`+lackingColumns(2, 3, "SELECT")+`, has_any_column_privilege($2::text, 'UPDATE'), has_table_privilege($2::text, 'DELETE'),
		has_function_privilege($4::text, 'EXECUTE'), has_function_privilege($5::text, 'EXECUTE')`,
		s.names.Dead, sentDefault, RetainColumns, s.names.SentAddSignature(), s.names.SentDropSignature())
	if err != nil {
		return RetainAccess{}, fmt.Errorf("pgoutbox: check access: %w", err)
	}
	a, err := pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (RetainAccess, error) {
		var a RetainAccess
		err := row.Scan(&a.DeadDelete, &a.DefaultSelectMissing, &a.DefaultUpdate, &a.DefaultDelete, &a.SentAdd, &a.SentDrop)
		return a, err
	})
	if err != nil {
		return RetainAccess{}, fmt.Errorf("pgoutbox: check access: %w", err)
	}
	a.DefaultSelectMissing = orNil(a.DefaultSelectMissing)
	return a, nil
}
