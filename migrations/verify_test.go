package migrations_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

func TestVerify(t *testing.T) {
	t.Parallel()
	latest := strconv.Itoa(int(migrations.Latest()))
	tests := []struct {
		name    string
		migrate bool
		// breakSQL damages the migrated schema; %[1]s is the quoted
		// schema, %[2]s the quoted outbox table.
		breakSQL string
		// want lists the expected problems; %[1]s in Object is the
		// unquoted schema.
		want []migrations.Problem
	}{
		{
			name:     "ChangedColumnType",
			migrate:  true,
			breakSQL: `ALTER TABLE %[2]s ALTER COLUMN attempts TYPE bigint`,
			want: []migrations.Problem{{
				Object:   "column %[1]s.outbox_events.attempts",
				Expected: "integer NOT NULL DEFAULT 0",
				Actual:   "bigint NOT NULL DEFAULT 0",
			}},
		},
		{
			name:     "DroppedConstraint",
			migrate:  true,
			breakSQL: `ALTER TABLE %[2]s DROP CONSTRAINT outbox_events_status_check`,
			want: []migrations.Problem{{
				Object:   "constraint outbox_events_status_check on %[1]s.outbox_events",
				Expected: "CHECK ((status = ANY (ARRAY['PENDING'::text, 'PROCESSING'::text, 'SENT'::text, 'FAILED'::text])))",
				Actual:   "missing",
			}},
		},
		{
			name:     "DroppedIndex",
			migrate:  true,
			breakSQL: `DROP INDEX %[1]s.outbox_events_due_idx`,
			want: []migrations.Problem{{
				Object:   "index %[1]s.outbox_events_due_idx",
				Expected: "btree (next_attempt_at, seq) WHERE (status = 'PENDING'::text)",
				Actual:   "missing",
			}},
		},
		{
			name:     "DroppedNotNull",
			migrate:  true,
			breakSQL: `ALTER TABLE %[2]s ALTER COLUMN event_type DROP NOT NULL`,
			want: []migrations.Problem{{
				Object:   "column %[1]s.outbox_events.event_type",
				Expected: "text NOT NULL",
				Actual:   "text",
			}},
		},
		{
			name:    "FreshMigration",
			migrate: true,
		},
		{
			name:    "IndexWithoutPredicate",
			migrate: true,
			breakSQL: `DROP INDEX %[1]s.outbox_events_held_idx;
				CREATE INDEX outbox_events_held_idx ON %[2]s (locked_at)`,
			want: []migrations.Problem{{
				Object:   "index %[1]s.outbox_events_held_idx",
				Expected: "btree (locked_at) WHERE (status = 'PROCESSING'::text)",
				Actual:   "btree (locked_at)",
			}},
		},
		{
			name:     "MissingTable",
			migrate:  true,
			breakSQL: `DROP TABLE %[2]s`,
			want: []migrations.Problem{{
				Object:   "table %[1]s.outbox_events",
				Expected: "table",
				Actual:   "missing",
			}},
		},
		{
			name: "NeverMigrated",
			want: []migrations.Problem{{
				Object:   "table %[1]s.outbox_events",
				Expected: "table",
				Actual:   "missing",
			}, {
				Object:   "version table %[1]s.outbox_events_schema_version",
				Expected: latest,
				Actual:   "missing (run Migrate)",
			}},
		},
		{
			name:     "NewerVersion",
			migrate:  true,
			breakSQL: `UPDATE %[1]s.outbox_events_schema_version SET version = version + 1`,
			want: []migrations.Problem{{
				Object:   "version table %[1]s.outbox_events_schema_version",
				Expected: latest,
				Actual:   strconv.Itoa(int(migrations.Latest())+1) + " (newer than this library knows: upgrade pgoutbox)",
			}},
		},
		{
			name:     "OlderVersion",
			migrate:  true,
			breakSQL: `UPDATE %[1]s.outbox_events_schema_version SET version = 0`,
			want: []migrations.Problem{{
				Object:   "version table %[1]s.outbox_events_schema_version",
				Expected: latest,
				Actual:   "0 (run Migrate)",
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := testdb.New(t)
			conn := db.Conn(t)
			cfg := migrations.Config{Table: db.Table()}
			if tt.migrate {
				require.NoError(t, migrations.Migrate(ctx, conn, cfg))
			}
			if tt.breakSQL != "" {
				mustExec(t, conn, fmt.Sprintf(tt.breakSQL, pgx.Identifier{db.Schema}.Sanitize(), quoted(db.Table())))
			}

			err := migrations.Verify(ctx, conn, cfg)

			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, outbox.ErrSchemaMismatch)
			missing := tt.want[0].Object == "table %[1]s.outbox_events" && tt.want[0].Actual == "missing"
			require.Equal(t, missing, errors.Is(err, outbox.ErrMissingTable), "only a missing table matches ErrMissingTable")
			var verr *migrations.VerifyError
			require.ErrorAs(t, err, &verr)
			want := make([]migrations.Problem, len(tt.want))
			for i, p := range tt.want {
				p.Object = fmt.Sprintf(p.Object, db.Schema)
				want[i] = p
				require.Contains(t, err.Error(), p.Object)
				require.Contains(t, err.Error(), p.Expected)
				require.Contains(t, err.Error(), p.Actual)
			}
			require.Equal(t, want, verr.Problems)
			require.Equal(t, db.Table(), verr.Table)
			require.Equal(t, tt.name == "NewerVersion", verr.OnlyNewer(), "only a newer version alone is OnlyNewer")
		})
	}
}

// TestVerifyChangesNothing runs Verify as a role that may only read, in a
// session whose transactions are read-only, and compares the catalog rows
// of the schema (with their xmin, which any update changes) before and
// after.
func TestVerifyChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewMigrated(t)
	cfg := migrations.Config{Table: db.Table()}
	role := readOnlyRole(t, db)
	admin := db.Conn(t)
	before := catalogSnapshot(t, admin, db.Schema)

	conn := db.Conn(t)
	mustExec(t, conn, "SET ROLE "+role)
	mustExec(t, conn, "SET default_transaction_read_only = on")
	require.NoError(t, migrations.Verify(ctx, conn, cfg))

	// The guard itself works: this session cannot write.
	_, err := conn.Exec(ctx, "CREATE TABLE "+pgx.Identifier{db.Schema, "probe"}.Sanitize()+" ()")
	require.Error(t, err)
	require.Equal(t, before, catalogSnapshot(t, admin, db.Schema))
}

// readOnlyRole creates a role with USAGE on the test's schema and SELECT on
// its tables, dropped when the test ends, and returns its quoted name.
func readOnlyRole(t *testing.T, db *testdb.DB) string {
	t.Helper()
	ctx := context.Background()
	var b [6]byte
	_, _ = rand.Read(b[:])
	role := pgx.Identifier{"pgotest_ro_" + hex.EncodeToString(b[:])}.Sanitize()
	schema := pgx.Identifier{db.Schema}.Sanitize()
	_, err := db.Pool.Exec(ctx, "CREATE ROLE "+role+" NOLOGIN")
	require.NoError(t, err, "creating a role needs CREATEROLE")
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), "DROP OWNED BY "+role)
		_, _ = db.Pool.Exec(context.Background(), "DROP ROLE "+role)
	})
	_, err = db.Pool.Exec(ctx, "GRANT USAGE ON SCHEMA "+schema+" TO "+role)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, "GRANT SELECT ON ALL TABLES IN SCHEMA "+schema+" TO "+role)
	require.NoError(t, err)
	return role
}

// catalogSnapshot returns the catalog rows of every relation, column,
// constraint and index in schema, with the xmin of each row.
func catalogSnapshot(t *testing.T, conn *pgx.Conn, schema string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `
		SELECT format('class %s %s %s %s', c.relname, c.xmin, c.relfilenode, c.reloptions)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1
		UNION ALL
		SELECT format('column %s.%s %s', c.relname, a.attname, a.xmin)
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1
		UNION ALL
		SELECT format('constraint %s %s', con.conname, con.xmin)
		FROM pg_constraint con JOIN pg_namespace n ON n.oid = con.connamespace WHERE n.nspname = $1
		ORDER BY 1`, schema)
	require.NoError(t, err)
	snap, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.NotEmpty(t, snap)
	return snap
}

// NewerCompatible holds for a newer version whose other problems are
// definitions that differ, and not once an object is missing or the
// version is not newer.
func TestVerifyNewerCompatible(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, breakSQL string
		want           bool
	}{
		{"ChangedDefault", `UPDATE %[1]s.outbox_events_schema_version SET version = version + 1;
			ALTER TABLE %[2]s ALTER COLUMN headers SET DEFAULT '{"v": 1}'`, true},
		// What a dispatcher of version 8 finds on a table of version 9:
		// a column it does not know (outcome_token) and a newer version.
		{"AddedColumn", `UPDATE %[1]s.outbox_events_schema_version SET version = version + 1;
			ALTER TABLE %[2]s ADD COLUMN later_token uuid`, true},
		{"DroppedColumn", `UPDATE %[1]s.outbox_events_schema_version SET version = version + 1;
			ALTER TABLE %[2]s DROP COLUMN started_at`, false},
		{"ChangedDefaultSameVersion", `ALTER TABLE %[2]s ALTER COLUMN headers SET DEFAULT '{"v": 1}'`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := testdb.New(t)
			conn := db.Conn(t)
			cfg := migrations.Config{Table: db.Table()}
			require.NoError(t, migrations.Migrate(ctx, conn, cfg))
			mustExec(t, conn, fmt.Sprintf(tt.breakSQL, pgx.Identifier{db.Schema}.Sanitize(), quoted(db.Table())))
			var verr *migrations.VerifyError
			require.ErrorAs(t, migrations.Verify(ctx, conn, cfg), &verr)
			require.Equal(t, tt.want, verr.NewerCompatible())
		})
	}
}
