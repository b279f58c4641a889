package migrations_test

import (
	"context"
	"io/fs"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

func TestRender(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	conn := db.Conn(t)
	cfg := migrations.Config{Table: db.Table()}

	files, err := migrations.Render(cfg)
	require.NoError(t, err)

	names, err := fs.Glob(files, "*")
	require.NoError(t, err)
	require.Equal(t, []string{
		"001_create_outbox.down.sql", "001_create_outbox.up.sql",
		"002_started_at.down.sql", "002_started_at.up.sql",
		"003_snoozes.down.sql", "003_snoozes.up.sql",
		"004_finished_idx.down.sql", "004_finished_idx.up.sql",
		"005_operator_indexes.down.sql", "005_operator_indexes.up.sql",
		"006_type_due_index.down.sql", "006_type_due_index.up.sql",
		"007_key_order.down.sql", "007_key_order.up.sql",
		"008_list_indexes.down.sql", "008_list_indexes.up.sql",
		"009_outcome_token.down.sql", "009_outcome_token.up.sql", "010_lean_tables.down.sql", "010_lean_tables.up.sql",
		"011_lean_indexes.down.sql", "011_lean_indexes.up.sql",
		"012_key_order_optional.down.sql", "012_key_order_optional.up.sql",
		"013_audit.down.sql", "013_audit.up.sql",
	}, names)
	read := func(name string) string {
		text, err := fs.ReadFile(files, name)
		require.NoError(t, err)
		require.Contains(t, string(text), quoted(db.Table()))
		require.NotContains(t, string(text), "{{")
		require.NotContains(t, string(text), "}}")
		return string(text)
	}
	require.Contains(t, read("001_create_outbox.up.sql"), `"outbox_events_due_idx"`)

	mustExec(t, conn, read("001_create_outbox.up.sql"))
	mustExec(t, conn, read("002_started_at.up.sql"))
	mustExec(t, conn, read("003_snoozes.up.sql"))
	mustExec(t, conn, read("004_finished_idx.up.sql"))
	mustExec(t, conn, read("005_operator_indexes.up.sql"))
	mustExec(t, conn, read("006_type_due_index.up.sql"))
	mustExec(t, conn, read("007_key_order.up.sql"))
	mustExec(t, conn, read("008_list_indexes.up.sql"))
	mustExec(t, conn, read("009_outcome_token.up.sql"))
	mustExec(t, conn, read("010_lean_tables.up.sql"))
	mustExec(t, conn, read("011_lean_indexes.up.sql"))
	mustExec(t, conn, read("012_key_order_optional.up.sql"))
	mustExec(t, conn, read("013_audit.up.sql"))
	require.NoError(t, migrations.Verify(ctx, conn, cfg))
	// A later switch to Migrate finds nothing to do.
	require.NoError(t, migrations.Migrate(ctx, conn, cfg))
	require.NoError(t, migrations.Verify(ctx, conn, cfg))

	mustExec(t, conn, read("013_audit.down.sql"))
	mustExec(t, conn, read("012_key_order_optional.down.sql"))
	mustExec(t, conn, read("011_lean_indexes.down.sql"))
	mustExec(t, conn, read("010_lean_tables.down.sql"))
	mustExec(t, conn, read("009_outcome_token.down.sql"))
	mustExec(t, conn, read("008_list_indexes.down.sql"))
	mustExec(t, conn, read("007_key_order.down.sql"))
	mustExec(t, conn, read("006_type_due_index.down.sql"))
	mustExec(t, conn, read("005_operator_indexes.down.sql"))
	mustExec(t, conn, read("004_finished_idx.down.sql"))
	v, err := migrations.Version(ctx, conn, cfg)
	require.NoError(t, err)
	require.EqualValues(t, 3, v)
	mustExec(t, conn, read("003_snoozes.down.sql"))
	v, err = migrations.Version(ctx, conn, cfg)
	require.NoError(t, err)
	require.EqualValues(t, 2, v)
	mustExec(t, conn, read("002_started_at.down.sql"))
	v, err = migrations.Version(ctx, conn, cfg)
	require.NoError(t, err)
	require.EqualValues(t, 1, v)
	mustExec(t, conn, read("001_create_outbox.down.sql"))
	require.Equal(t, []string{"outbox_events_schema_version"}, tablesIn(t, conn, db.Schema))
	v, err = migrations.Version(ctx, conn, cfg)
	require.NoError(t, err)
	require.Zero(t, v)
	require.ErrorIs(t, migrations.Verify(ctx, conn, cfg), outbox.ErrSchemaMismatch)
}

func TestRenderDefaults(t *testing.T) {
	t.Parallel()

	files, err := migrations.Render(migrations.Config{})
	require.NoError(t, err)

	up, err := fs.ReadFile(files, "001_create_outbox.up.sql")
	require.NoError(t, err)
	require.Contains(t, string(up), `CREATE TABLE "public"."outbox_events" (`)
	require.Contains(t, string(up), `UPDATE "public"."outbox_events_schema_version" SET version = 1;`)
}
