package sqlname_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// plain is the documented rule for schema and table names (see
// outbox.Table), restated independently of internal/ident: 1 to 63 bytes
// of a-z, 0-9 and _, not starting with a digit; "pg_" is checked apart.
var plain = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// suffixes are every object name the library derives from a table name.
var suffixes = []string{
	sqlname.SuffixPkey, sqlname.SuffixDueIndex, sqlname.SuffixLeaseIndex, sqlname.SuffixTypeDueIndex, sqlname.SuffixOrderIndex, sqlname.SuffixStatusCheck,
	sqlname.SuffixLeaseCheck, sqlname.SuffixAttemptsCheck, sqlname.SuffixLogCheck, sqlname.SuffixErrorCheck,
	sqlname.SuffixSeqListIndex, sqlname.SuffixTypeListIndex, sqlname.SuffixAggListIndex, sqlname.SuffixCodeListIndex,
	sqlname.SuffixVersion,
}

// FuzzTableNames checks the schema and table names a user configures: a
// name is accepted exactly when the documented rule allows it, every
// accepted name reaches SQL quoted, so that PostgreSQL's own parser
// (parse_ident) reads each quoted name the library builds back as exactly
// the input, and every rejected one gets ErrInvalidIdentifier from
// Table.Validate and sqlname.For, and an *outbox.ConfigError wrapping it
// from the constructors that take a Table, before any SQL exists.
func FuzzTableNames(f *testing.F) {
	for _, s := range [][2]string{
		{"", ""}, {"public", "outbox_events"}, {"app", "orders"}, {"_x1", "t"},
		{"Public", "t"}, {"s", "Outbox"}, {"PUBLIC", "OUTBOX"}, {"pg_catalog", "t"}, {"s", "pg_t"}, {"s", "Pg_t"},
		{"1s", "t"}, {"s", "9t"}, {"a-b", "t"}, {"s", "a b"}, {"s", `a"b`}, {`"s"`, "t"}, {"s", "t;drop table x"},
		{"user", "select"}, {"s", "t\x00"}, {"s\x00", "t"}, {"s", "\xff"}, {"été", "t"}, {"s", "tı"}, {"s", "t\n"},
		{strings.Repeat("s", 63), strings.Repeat("t", 48)}, {strings.Repeat("s", 64), "t"}, {"s", strings.Repeat("t", 49)},
	} {
		f.Add(s[0], s[1])
	}
	pool := testdb.New(f).Pool
	f.Fuzz(func(t *testing.T, schema, name string) {
		table := outbox.Table{Schema: schema, Name: name}
		names, err := sqlname.For(table)
		require.Equal(t, err == nil, table.Validate() == nil)
		def := table.WithDefaults()
		ok := allowed(def.Schema, 63) && allowed(def.Name, 48)
		if !ok {
			require.ErrorIs(t, err, outbox.ErrInvalidIdentifier, "%q.%q was accepted", def.Schema, def.Name)
			requireConfigErrors(t, table)
			return
		}
		require.NoError(t, err)
		requireRoundTrip(t, pool, def, names)
	})
}

// allowed reports whether the documented rule accepts name, at most max
// bytes long.
func allowed(name string, max int) bool {
	return len(name) <= max && plain.MatchString(name) && !strings.HasPrefix(name, "pg_")
}

// requireConfigErrors checks that the constructors taking a Table refuse
// it with a typed error before building any SQL.
func requireConfigErrors(t *testing.T, table outbox.Table) {
	t.Helper()
	_, err := emitter.New(emitter.Config{Table: table})
	requireConfigError(t, err)
	_, err = inbox.New(inbox.Config{Table: table})
	requireConfigError(t, err)
	_, err = migrations.Render(migrations.Config{Table: table})
	require.ErrorIs(t, err, outbox.ErrInvalidIdentifier)
}

func requireConfigError(t *testing.T, err error) {
	t.Helper()
	var cerr *outbox.ConfigError
	require.True(t, errors.As(err, &cerr), "%T %v", err, err)
	require.Equal(t, "Table", cerr.Field)
	require.ErrorIs(t, err, outbox.ErrInvalidIdentifier)
}

// requireRoundTrip has PostgreSQL parse every quoted name built for the
// table and checks that each reads back as exactly the input.
func requireRoundTrip(t *testing.T, pool *pgxpool.Pool, table outbox.Table, names sqlname.Names) {
	t.Helper()
	quoted := []string{names.Schema, names.Qualified, names.VersionTable}
	want := [][]string{{table.Schema}, {table.Schema, table.Name}, {table.Schema, table.Name + sqlname.SuffixVersion}}
	for _, suffix := range suffixes {
		quoted = append(quoted, names.Quoted(suffix))
		want = append(want, []string{table.Name + suffix})
	}
	for _, q := range quoted {
		// Quoted even where PostgreSQL would read the name unquoted: a
		// keyword ("user", "select") is a plain name under the rule.
		require.True(t, strings.HasPrefix(q, `"`) && strings.HasSuffix(q, `"`), "%s is not quoted", q)
	}
	rows, err := pool.Query(context.Background(),
		`SELECT parse_ident(q) FROM unnest($1::text[]) WITH ORDINALITY AS u(q, n) ORDER BY n`, quoted)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[[]string])
	require.NoError(t, err)
	require.Equal(t, want, got, "quoted as %q", quoted)
	require.Equal(t, table, names.Table)
}
