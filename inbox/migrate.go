package inbox

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/tmplmigrate"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

//go:embed sql/*.sql
var files embed.FS

// FS is the inbox migration templates as tern reads them: NNN_name.sql
// files whose names in double braces ({{.schema}}, {{.table}}, {{.pkey}},
// {{.consumer_check}}, {{.hash_check}}, {{.processed_idx}}) are quoted
// identifiers filled in by [Migrate]. docs/inbox.md shows how to render them
// for another migration tool.
var FS fs.FS = mustSub(files, "sql")

func mustSub(fsys fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(err) // the embedded directory is fixed at build time
	}
	return sub
}

// Migrate creates or upgrades the inbox table of cfg on conn to the latest
// version, keeping its version in <table>_schema_version. It is idempotent
// and safe when several processes call it at once: it holds a session
// advisory lock keyed by the table's qualified name while it runs, so one
// caller migrates and the others wait and then find nothing to do; a lock
// held for longer than a minute gives a *[migrations.LockError] naming the
// backend that holds it, and nothing is touched. It needs
// a direct connection, not one behind a transaction-mode pooler: conn is
// a *pgx.Conn, or a *pgxpool.Pool to acquire one from for the call (see
// [migrations.Conn]). A nil conn gives an *outbox.InputError naming "conn",
// an invalid table name an *outbox.ConfigError naming "Table", and nothing
// is touched; so do [Version] and [Verify].
func Migrate[C migrations.Conn](ctx context.Context, conn C, cfg Config) error {
	set, err := cfg.migrationSet()
	if err != nil {
		return err
	}
	return tmplmigrate.WithConn(ctx, conn, func(c *pgx.Conn) error { return tmplmigrate.Migrate(ctx, c, set) })
}

// Render returns the inbox migrations as plain SQL for cfg's names, for
// teams that run goose, golang-migrate or atlas instead of [Migrate]: for
// every NNN_name.sql in [FS], NNN_name.up.sql and NNN_name.down.sql, each
// recording its version where [Version] reads it. It touches no database.
func Render(cfg Config) (fs.FS, error) {
	set, err := cfg.migrationSet()
	if err != nil {
		return nil, err
	}
	return tmplmigrate.Render(set, "inbox.Render")
}

// Version returns the schema version of the inbox table of cfg on conn, or
// 0 when it has never been migrated.
func Version[C migrations.Conn](ctx context.Context, conn C, cfg Config) (int32, error) {
	names, err := cfg.names()
	if err != nil {
		return 0, err
	}
	var v int32
	err = tmplmigrate.WithConn(ctx, conn, func(c *pgx.Conn) (err error) {
		v, err = tmplmigrate.Version(ctx, c, names.VersionTable)
		return err
	})
	return v, err
}

// Latest returns the newest inbox schema version this library ships.
func Latest() int32 { return tmplmigrate.Latest(FS) }

func (c Config) migrationSet() (tmplmigrate.Set, error) {
	names, err := c.names()
	if err != nil {
		return tmplmigrate.Set{}, err
	}
	return tmplmigrate.Set{FS: FS, Names: names, Data: templateData(names)}, nil
}

// Verify checks that the inbox table of cfg holds every column (type, NOT
// NULL, default), constraint and index this version relies on and that its
// schema version is [Latest]. It returns nil when all match, and otherwise
// an error matching [outbox.ErrSchemaMismatch] that lists everything
// missing or different. It only reads the catalogs and the version table.
func Verify[C migrations.Conn](ctx context.Context, conn C, cfg Config) error {
	names, err := cfg.names()
	if err != nil {
		return err
	}
	return tmplmigrate.WithConn(ctx, conn, func(c *pgx.Conn) error { return verify(ctx, c, cfg, names) })
}

func verify(ctx context.Context, conn *pgx.Conn, cfg Config, names sqlname.Names) error {
	rows, err := conn.Query(ctx, catalogSQL, names.Qualified)
	if err != nil {
		return errtext.Wrap(err, "inbox: verify %s", names.Table)
	}
	have, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return errtext.Wrap(err, "inbox: verify %s", names.Table)
	}
	var problems []string
	for _, want := range expectedObjects(names) {
		if !slices.Contains(have, want) {
			problems = append(problems, "missing or different: "+want)
		}
	}
	v, err := Version(ctx, conn, cfg)
	if err != nil {
		return errtext.Wrap(err, "inbox: verify %s: version", names.Table)
	}
	if v != Latest() {
		problems = append(problems, fmt.Sprintf("version is %d, want %d", v, Latest()))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: inbox %s: %s", outbox.ErrSchemaMismatch, names.Table, strings.Join(problems, "; "))
	}
	return nil
}

// catalogSQL describes the columns, constraints and indexes of a table, one
// line each, in the words of expectedObjects.
const catalogSQL = `
SELECT format('column %s %s%s%s', a.attname, format_type(a.atttypid, a.atttypmod),
	CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END,
	' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid))
FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT format('constraint %s %s', conname, pg_get_constraintdef(oid))
FROM pg_constraint WHERE conrelid = to_regclass($1)
UNION ALL
SELECT format('index %s %s', c.relname, substring(pg_get_indexdef(i.indexrelid) FROM 'USING .*'))
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = to_regclass($1) AND NOT i.indisprimary`

// expectedObjects is what the latest migration leaves, as catalogSQL
// prints it. A migration that changes the table edits this list too.
func expectedObjects(n sqlname.Names) []string {
	return []string{
		"column consumer text NOT NULL",
		"column event_id uuid NOT NULL",
		"column payload_hash bytea NOT NULL",
		"column processed_at timestamp with time zone NOT NULL DEFAULT now()",
		"constraint " + n.Object(sqlname.SuffixPkey) + " PRIMARY KEY (consumer, event_id)",
		"constraint " + n.Object(suffixConsumerCheck) + " CHECK (((octet_length(consumer) >= 1) AND (octet_length(consumer) <= 255)))",
		"constraint " + n.Object(suffixHashCheck) + " CHECK ((octet_length(payload_hash) = 32))",
		"index " + n.Object(suffixProcessedIdx) + " USING btree (processed_at)",
	}
}

// templateData is what the inbox templates see: every name quoted.
func templateData(n sqlname.Names) map[string]any {
	return map[string]any{
		"schema":         n.Schema,
		"table":          n.Qualified,
		"pkey":           n.Quoted(sqlname.SuffixPkey),
		"consumer_check": n.Quoted(suffixConsumerCheck),
		"hash_check":     n.Quoted(suffixHashCheck),
		"processed_idx":  n.Quoted(suffixProcessedIdx),
	}
}
