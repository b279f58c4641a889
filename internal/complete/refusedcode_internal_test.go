package complete

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// A completion refused by a CHECK constraint is a refusal; PostgreSQL
// finding no partition of the SENT history for the row (the same
// SQLSTATE, no constraint) is not: the retention pass creates the
// partition and the same move then succeeds.
func TestNoPartitionIsNoRefusal(t *testing.T) {
	check := &pgconn.PgError{Code: "23514", ConstraintName: "outbox_events_sent_check"}
	noPart := &pgconn.PgError{Code: "23514", Message: `no partition of relation "outbox_events_sent" found for row`}
	require.True(t, Refused(fmt.Errorf("complete: %w", check)))
	require.False(t, Refused(fmt.Errorf("complete: %w", noPart)))
	require.False(t, Refused(&pgconn.PgError{Code: "40P01"}))
}
