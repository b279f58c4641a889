package testdb_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// OnOutcomes runs its function for the writes of outcomes only.
func TestOnOutcomesRunsForOutcomesOnly(t *testing.T) {
	db := testdb.NewMigrated(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'refused'; END $$`)
	require.NoError(t, err)
	db.OnOutcomes(t, "refuse")
	id := uuid.New()
	for _, c := range []struct {
		sql     string
		refused bool
	}{
		{`INSERT INTO outbox_events (id, event_type) VALUES ($1, 'x')`, false},
		{`UPDATE outbox_events SET status = 'PROCESSING', lock_token = $1, lease_until = now() WHERE id = $1`, false},
		{`UPDATE outbox_events SET attempts = attempts + 1 WHERE id = $1`, true},
		{`INSERT INTO outbox_events_sent (id, seq, event_type, sent_at) VALUES ($1, 1, 'x', now())`, true},
		{`INSERT INTO outbox_events_dead (id, seq, event_type, last_error_code) VALUES ($1, 1, 'x', 'handler_error')`, true},
		{`INSERT INTO outbox_events_dead (id, seq, event_type, last_error_code) VALUES ($1, 1, 'x', 'outcome_refused')`, false},
	} {
		_, err := db.Pool.Exec(ctx, c.sql, id)
		if c.refused {
			require.ErrorContains(t, err, "refused", c.sql)
		} else {
			require.NoError(t, err, c.sql)
		}
	}
}
