package dispatcher_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// A role whose transactions default to SERIALIZABLE made 18–33% of claims
// and 14–26 completions fail with 40001: the dispatcher's statements are
// designed for READ COMMITTED. Start refuses such a role, saying why and
// what to set; the same role set back to READ COMMITTED starts.
func TestStartRefusesSerializableDefault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	role := db.NewRole(t, "pgotest_serializable")
	quoted := pgx.Identifier{role}.Sanitize()
	_, err := db.Pool.Exec(ctx, fmt.Sprintf(`
GRANT USAGE ON SCHEMA %[1]s TO %[2]s;
GRANT SELECT, UPDATE, DELETE ON outbox_events TO %[2]s;
GRANT SELECT ON outbox_events_schema_version TO %[2]s;
ALTER ROLE %[2]s SET default_transaction_isolation = 'serializable'`, pgx.Identifier{db.Schema}.Sanitize(), quoted))
	require.NoError(t, err)

	d, err := dispatcher.New(db.RolePool(t, role, 4), baseConfig(db))
	require.NoError(t, err)
	require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error { return nil }))
	err = d.Start(ctx)
	require.ErrorIs(t, err, dispatcher.ErrIsolation)
	require.Contains(t, err.Error(), "serializable")
	require.Contains(t, err.Error(), "default_transaction_isolation = 'read committed'")

	_, err = db.Pool.Exec(ctx, `ALTER ROLE `+quoted+` SET default_transaction_isolation = 'read committed'`)
	require.NoError(t, err)
	d, err = dispatcher.New(db.RolePool(t, role, 4), baseConfig(db))
	require.NoError(t, err)
	require.NoError(t, d.Handle("x", func(context.Context, outbox.Event) error { return nil }))
	runDispatcher(t, d)
}
