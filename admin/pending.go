package admin

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
)

// TypePending is the PENDING rows of one event type.
type TypePending struct {
	// Type is the event type.
	Type string `json:"type"`
	// Pending is the number of PENDING rows of the type.
	Pending int64 `json:"pending"`
	// Due is how many of them are due now (next_attempt_at <= now()).
	Due int64 `json:"due"`
	// OldestDueAge is how long the oldest due row of the type has been
	// due, by the database clock; 0 when none is due. A type whose age
	// keeps growing while others' do not is one no running dispatcher
	// claims (a type without a handler anywhere, or whose replicas are
	// not deployed yet).
	OldestDueAge time.Duration `json:"oldest_due_age_ns"`
}

// PendingByType counts the PENDING rows per event type, in type order,
// with how many are due and the age of the oldest due one, in one
// statement. It reads the type due index (schema version 6), which holds
// PENDING rows only: its cost follows the backlog, however many SENT and
// FAILED rows the table keeps.
func (a *Admin) PendingByType(ctx context.Context) ([]TypePending, error) {
	rows, err := a.db.Query(ctx, a.sql.pendingByType)
	if err != nil {
		return nil, errtext.Wrap(err, "admin: pending by type %s", a.table)
	}
	var out []TypePending
	var tp TypePending
	var ageMicros int64
	_, err = pgx.ForEachRow(rows, []any{&tp.Type, &tp.Pending, &tp.Due, &ageMicros}, func() error {
		tp.OldestDueAge = time.Duration(ageMicros) * time.Microsecond
		out = append(out, tp)
		return nil
	})
	if err != nil {
		return nil, errtext.Wrap(err, "admin: pending by type %s", a.table)
	}
	return out, nil
}
