package dispatcher_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// A grant of UPDATE on the columns the dispatcher wrote up to schema
// version 8 (docs/operations.md offers it) lacks outcome_token, which
// every outcome of version 9 writes: the database would refuse every
// outcome, and the refused-outcome write too (it records its token like
// every outcome), so each event would run again until worker_lost. Start
// refuses such a role, naming the privilege and the column; once the
// column is granted, it starts.
func TestStartRefusesColumnGrantWithoutOutcomeToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	role := db.NewRole(t, "pgotest_columns")
	quoted := pgx.Identifier{role}.Sanitize()
	version8 := []string{
		"status", "attempts", "recoveries", "snoozes", "next_attempt_at", "lock_token", "lock_owner",
		"locked_at", "lease_until", "heartbeat_at", "started_at", "sent_at", "failed_at",
		"last_error_code", "last_error", "attempt_log",
	}
	_, err := db.Pool.Exec(ctx, fmt.Sprintf(`
GRANT USAGE ON SCHEMA %[1]s TO %[2]s;
GRANT SELECT, DELETE ON outbox_events TO %[2]s;
GRANT UPDATE (%[3]s) ON outbox_events TO %[2]s;
GRANT SELECT ON outbox_events_schema_version TO %[2]s`,
		pgx.Identifier{db.Schema}.Sanitize(), quoted, strings.Join(version8, ", ")))
	require.NoError(t, err)

	d, err := dispatcher.New(db.RolePool(t, role, 4), baseConfig(db))
	require.NoError(t, err)
	require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error { return nil }))
	err = d.Start(ctx)
	require.ErrorIs(t, err, dispatcher.ErrMissingPrivilege)
	var pe *dispatcher.PrivilegeError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "UPDATE", pe.Privilege)
	require.Contains(t, err.Error(), "outcome_token")

	_, err = db.Pool.Exec(ctx, `GRANT UPDATE (outcome_token) ON outbox_events TO `+quoted)
	require.NoError(t, err)
	d, err = dispatcher.New(db.RolePool(t, role, 4), baseConfig(db))
	require.NoError(t, err)
	require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error { return nil }))
	runDispatcher(t, d)
}

// PostgreSQL runs READ UNCOMMITTED as READ COMMITTED (its documentation,
// "Transaction Isolation"): a role whose transactions default to it gets
// the isolation the dispatcher's statements are designed for, so Start
// lets it start instead of refusing it with ErrIsolation.
func TestStartAcceptsReadUncommittedDefault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	role := db.NewRole(t, "pgotest_uncommitted")
	quoted := pgx.Identifier{role}.Sanitize()
	_, err := db.Pool.Exec(ctx, fmt.Sprintf(`
GRANT USAGE ON SCHEMA %[1]s TO %[2]s;
GRANT SELECT, UPDATE, DELETE ON outbox_events TO %[2]s;
GRANT SELECT ON outbox_events_schema_version TO %[2]s;
ALTER ROLE %[2]s SET default_transaction_isolation = 'read uncommitted'`, pgx.Identifier{db.Schema}.Sanitize(), quoted))
	require.NoError(t, err)
	d, err := dispatcher.New(db.RolePool(t, role, 4), baseConfig(db))
	require.NoError(t, err)
	require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error { return nil }))
	runDispatcher(t, d)
}
