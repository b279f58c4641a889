package dispatcher_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// A role whose transactions default to SERIALIZABLE made 18–33% of claims
// and 14–26 completions fail with 40001: the dispatcher's statements are
// designed for READ COMMITTED. Start refuses such a role, saying why and
// what to set; the same role set back to READ COMMITTED starts.
func TestStartRefusesSerializableDefault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	role, quoted := newGrantedRole(t, db, "pgotest_serializable", `
GRANT USAGE ON SCHEMA %[1]s TO %[2]s;
GRANT SELECT, UPDATE, DELETE ON outbox_events TO %[2]s;
GRANT SELECT ON outbox_events_schema_version TO %[2]s;
`+finishedGrants+`;
ALTER ROLE %[2]s SET default_transaction_isolation = 'serializable'`)

	err := roleDispatcher(t, db, role).Start(ctx)
	require.ErrorIs(t, err, dispatcher.ErrIsolation)
	require.Contains(t, err.Error(), "serializable")
	require.Contains(t, err.Error(), "default_transaction_isolation = 'read committed'")

	_, err = db.Pool.Exec(ctx, `ALTER ROLE `+quoted+` SET default_transaction_isolation = 'read committed'`)
	require.NoError(t, err)
	runDispatcher(t, roleDispatcher(t, db, role))
}
