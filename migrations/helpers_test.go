package migrations_test

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// quoted returns the quoted schema.table of t.
func quoted(t outbox.Table) string {
	return pgx.Identifier{t.Schema, t.Name}.Sanitize()
}

// suffixed is the quoted schema.table name with suffix added to the table.
func suffixed(quotedTable, suffix string) string {
	return strings.TrimSuffix(quotedTable, `"`) + suffix + `"`
}

// mustExec runs sql on conn and fails the test on error.
func mustExec(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	_, err := conn.Exec(context.Background(), sql, args...)
	require.NoError(t, err, sql)
}

// tablesIn lists the ordinary tables of schema, sorted by name.
func tablesIn(t *testing.T, conn *pgx.Conn, schema string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT c.relname::text FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind = 'r' ORDER BY 1`, schema)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

// insertEvent adds one minimal PENDING event to the outbox table.
func insertEvent(t *testing.T, conn *pgx.Conn, table outbox.Table) {
	t.Helper()
	mustExec(t, conn, "INSERT INTO "+quoted(table)+" (id, event_type) VALUES (gen_random_uuid(), 'test.event')")
}

// countEvents returns the number of rows in the outbox table.
func countEvents(t *testing.T, conn *pgx.Conn, table outbox.Table) int {
	t.Helper()
	var n int
	err := conn.QueryRow(context.Background(), "SELECT count(*) FROM "+quoted(table)).Scan(&n)
	require.NoError(t, err)
	return n
}

// splitPartitions splits table names into the history's time partitions
// (outbox_events_sYYYYMMDDHHMM) and the others.
func splitPartitions(names []string) (tables, partitions []string) {
	for _, name := range names {
		if regexp.MustCompile(`^outbox_events_s\d{12}$`).MatchString(name) {
			partitions = append(partitions, name)
		} else {
			tables = append(tables, name)
		}
	}
	return tables, partitions
}
