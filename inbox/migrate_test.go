package inbox_test

import (
	"context"
	"io/fs"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

func TestMigrateConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	cfg := inbox.Config{Table: outbox.Table{Schema: db.Schema}}
	const replicas = 10
	conns := make([]*pgx.Conn, replicas)
	for i := range conns {
		conns[i] = db.Conn(t)
	}

	errs := concurrently(replicas, func(i int) error { return inbox.Migrate(ctx, conns[i], cfg) })

	for i, err := range errs {
		require.NoError(t, err, "replica %d", i)
	}
	require.NoError(t, inbox.Verify(ctx, conns[0], cfg))
	require.Equal(t, "outbox_inbox outbox_inbox_schema_version", tablesIn(t, db))
}

// Migrate, Verify and Version take a *pgxpool.Pool too, and give back the
// connection they acquire.
func TestMigrateThroughPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	cfg := inbox.Config{Table: outbox.Table{Schema: db.Schema}}
	pool := db.NewPool(t, 2)
	require.ErrorIs(t, inbox.Verify(ctx, pool, cfg), outbox.ErrSchemaMismatch)
	require.NoError(t, inbox.Migrate(ctx, pool, cfg))
	require.NoError(t, inbox.Verify(ctx, pool, cfg))
	v, err := inbox.Version(ctx, pool, cfg)
	require.NoError(t, err)
	require.Equal(t, inbox.Latest(), v)
	require.Zero(t, pool.Stat().AcquiredConns())
}

func TestMigrateIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	conn := db.Conn(t)
	cfg := inbox.Config{Table: outbox.Table{Schema: db.Schema}}

	v, err := inbox.Version(ctx, conn, cfg)
	require.NoError(t, err)
	require.Zero(t, v)
	for range 3 {
		require.NoError(t, inbox.Migrate(ctx, conn, cfg))
	}

	v, err = inbox.Version(ctx, conn, cfg)
	require.NoError(t, err)
	require.Equal(t, inbox.Latest(), v)
	require.NoError(t, inbox.Verify(ctx, conn, cfg))
	require.Equal(t, "outbox_inbox outbox_inbox_schema_version", tablesIn(t, db))
}

func TestMigrateInvalidConfig(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	conn := db.Conn(t)
	cfg := inbox.Config{Table: outbox.Table{Schema: db.Schema, Name: "Inbox"}}

	require.ErrorIs(t, inbox.Migrate(ctx, conn, cfg), outbox.ErrInvalidIdentifier)
	require.ErrorIs(t, inbox.Verify(ctx, conn, cfg), outbox.ErrInvalidIdentifier)
	require.Empty(t, tablesIn(t, db))
}

func TestMigrateNextToOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	conn := db.Conn(t)
	cfg := inbox.Config{Table: outbox.Table{Schema: db.Schema}}

	require.NoError(t, inbox.Migrate(ctx, conn, cfg))

	require.NoError(t, inbox.Verify(ctx, conn, cfg))
	require.Equal(t, "outbox_events outbox_events_audit outbox_events_dead outbox_events_schema_version outbox_events_sent outbox_events_sent_default outbox_inbox outbox_inbox_schema_version",
		tablesIn(t, db))
}

func TestVerify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		alter string
		want  string
	}{
		{"ColumnType", "ALTER TABLE outbox_inbox ALTER COLUMN consumer TYPE varchar(255)", "column consumer text NOT NULL"},
		{"IndexMissing", "DROP INDEX outbox_inbox_processed_idx", "index"},
		{"NotMigrated", "DROP TABLE outbox_inbox, outbox_inbox_schema_version", "version is 0, want 1"},
		{"PrimaryKeyChanged", "ALTER TABLE outbox_inbox DROP CONSTRAINT outbox_inbox_pkey, ADD CONSTRAINT outbox_inbox_pkey PRIMARY KEY (event_id, consumer)", "PRIMARY KEY (consumer, event_id)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			conn := b.db.Conn(t)
			require.NoError(t, inbox.Verify(ctx, conn, b.cfg))
			_, err := conn.Exec(ctx, tt.alter)
			require.NoError(t, err)

			err = inbox.Verify(ctx, conn, b.cfg)

			require.ErrorIs(t, err, outbox.ErrSchemaMismatch)
			require.Contains(t, err.Error(), tt.want)
		})
	}
}

// tablesIn returns the names of the tables in the test's schema, sorted
// and separated by spaces.
func tablesIn(t *testing.T, db *testdb.DB) string {
	t.Helper()
	var names string
	err := db.Pool.QueryRow(context.Background(), `SELECT coalesce(string_agg(tablename, ' ' ORDER BY tablename), '')
		FROM pg_tables WHERE schemaname = $1`, db.Schema).Scan(&names)
	require.NoError(t, err)
	return names
}

func TestRenderFillsEveryName(t *testing.T) {
	t.Parallel()
	fsys, err := inbox.Render(inbox.Config{})
	require.NoError(t, err)
	up, err := fs.ReadFile(fsys, "001_create_inbox.up.sql")
	require.NoError(t, err)
	require.NotContains(t, string(up), "{{")
	require.Contains(t, string(up), `"public"."outbox_inbox"`)
	down, err := fs.ReadFile(fsys, "001_create_inbox.down.sql")
	require.NoError(t, err)
	require.Contains(t, string(down), "UPDATE \"public\".\"outbox_inbox_schema_version\" SET version = 0")
}
