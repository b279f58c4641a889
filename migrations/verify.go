package migrations

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/tmplmigrate"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Problem is one difference between the database and what the library
// needs.
type Problem struct {
	// Object names what is wrong, kind first: "table public.outbox_events",
	// "column public.outbox_events.status", "constraint
	// outbox_events_status_check on public.outbox_events", "index
	// public.outbox_events_due_idx", "partition key of
	// public.outbox_events_sent", "default partition of
	// public.outbox_events_sent" or "version table
	// public.outbox_events_schema_version". The outbox table's dead
	// letters (<table>_dead), SENT history (<table>_sent) and audit table
	// (<table>_audit) are named the same way.
	Object string
	// Expected is what the library needs, in PostgreSQL's own words (type
	// as format_type prints it, definitions as pg_get_constraintdef and
	// pg_get_indexdef print them).
	Expected string
	// Actual is what the database holds, in the same words, or "missing".
	Actual string
}

// String returns "object: expected X, actual Y".
func (p Problem) String() string {
	return p.Object + ": expected " + p.Expected + ", actual " + p.Actual
}

// VerifyError is the error [Verify] returns when the database does not hold
// the objects the library relies on. It lists every problem found, not
// only the first, and unwraps to [outbox.ErrSchemaMismatch].
type VerifyError struct {
	// Table is the outbox that was verified.
	Table outbox.Table
	// Problems holds at least one entry: for the outbox table, then its
	// dead letters, its SENT history and its audit table, the table, its columns,
	// constraints, indexes and partitioning; the version last. When the
	// outbox table is missing, its other two tables are not examined.
	Problems []Problem

	missing bool // the table does not exist
	newer   bool // the version is newer than Latest
}

// OnlyNewer reports whether the one problem found is a schema version
// newer than this library knows: a later release migrated the table. Its
// migrations so far only add what older versions ignore, so an older
// dispatcher may keep running on it during a rolling upgrade (see
// docs/operations.md).
func (e *VerifyError) OnlyNewer() bool { return e.newer && len(e.Problems) == 1 }

// NewerCompatible reports whether the schema version is newer than this
// library knows and every object this version relies on is present: the
// other problems, if any, are definitions that differ (a default, a CHECK,
// an index that a later release changed). A dispatcher of this version
// runs on such a schema during a rolling upgrade; a missing table,
// column, constraint or index still refuses it.
func (e *VerifyError) NewerCompatible() bool {
	if !e.newer {
		return false
	}
	for _, p := range e.Problems {
		if p.Actual == "missing" {
			return false
		}
	}
	return true
}

// Error names every object with its expected and actual state.
func (e *VerifyError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	noun := "problems"
	if len(e.Problems) == 1 {
		noun = "problem"
	}
	return fmt.Sprintf("pgoutbox: schema of %s does not match (%d %s): %s",
		e.Table, len(e.Problems), noun, strings.Join(parts, "; "))
}

// Unwrap returns [outbox.ErrSchemaMismatch], and [outbox.ErrMissingTable]
// too when the table does not exist.
func (e *VerifyError) Unwrap() []error {
	if e.missing {
		return []error{outbox.ErrSchemaMismatch, outbox.ErrMissingTable}
	}
	return []error{outbox.ErrSchemaMismatch}
}

// Verify checks that the outbox on conn holds every table, column (type,
// NOT NULL, default), constraint and index this version of the library
// relies on, in the outbox table, its dead letters, its SENT history
// (a table partitioned by range of sent_at, with its default partition)
// and its audit table (schema version 13), and that its schema version
// is [Latest]. It returns nil when
// everything matches, a [*VerifyError] listing every difference when
// something does not, or another error when the catalog cannot be read.
// Columns, constraints and indexes the library does not know are allowed.
// The outbox table's order index (<table>_order_idx) may be missing or
// invalid (schema version 12, [Config].KeyOrder): when it is there and
// valid its definition is checked; dispatchers with Ordering PerKey
// check at start that it is.
//
// With cfg.Kind outbox.KindLog it checks a log instead: the log
// partitioned by RANGE (xid) with no default partition, its columns (xid
// defaulting to exactly pg_current_xact_id(), seq an identity), its xid
// index, a part holding the next transaction id (else the problem says
// "no partition for new transactions": inserts would fail), its ticks (at
// least the baseline tick) and its ticker row (these two only when the
// role may read them), the ticks, ticker, cursor and parked tables, the
// log's functions, and the version [LatestLog]. A log verified as an
// outbox, or an outbox as a log, gives one problem saying so ("table is a
// log, not an outbox"), not one per column.
//
// Verify only reads the system catalogs and the version table: it never
// creates, alters or drops anything, and works for a role that has only
// USAGE on the schema and SELECT on the version table. It reads in one
// transaction whose lock_timeout is cfg.LockTimeout (default one minute):
// the catalog functions it calls lock the table and its indexes (ACCESS
// SHARE), so a session holding an ACCESS EXCLUSIVE lock on the table (an
// ALTER TABLE, a VACUUM FULL, a LOCK TABLE) would otherwise hold Verify
// up for as long as it keeps it. Past the timeout Verify returns a
// [*VerifyLockError] naming that session.
func Verify[C Conn](ctx context.Context, conn C, cfg Config) error {
	names, err := sqlname.For(cfg.Table)
	if err != nil {
		return err
	}
	if err := checkLockTimeout(cfg.LockTimeout); err != nil {
		return err
	}
	if err := checkKind(cfg.Kind); err != nil {
		return err
	}
	spec := specFor(cfg.Kind)
	wait := cmp.Or(cfg.LockTimeout, tmplmigrate.DefaultLockWait)
	var cat *catalog
	err = tmplmigrate.WithConn(ctx, conn, func(c *pgx.Conn) (err error) {
		cat, err = readCatalogWithin(ctx, c, names, spec, wait)
		return err
	})
	var input *outbox.InputError
	var locked *VerifyLockError
	if errors.As(err, &input) || errors.As(err, &locked) {
		return err
	}
	if err != nil {
		return errtext.Wrap(err, "verify %s", names.Table)
	}
	if problems := cat.compare(names, spec); len(problems) > 0 {
		return &VerifyError{Table: names.Table, Problems: problems, missing: cat.tables[0].kind == "",
			newer: versionNewer(cat.version, spec.latest)}
	}
	return nil
}

// catalog is what the database holds for one outbox.
type catalog struct {
	tables  []*tableCatalog // in the order of expectedTables
	version string          // the version as text, or what is wrong
	// functions maps a function's name to describeFunction.
	functions map[string]string
	// log is what only a log has, nil for an outbox.
	log *logCatalog
}

// tableCatalog is what the database holds for one table of an outbox.
type tableCatalog struct {
	kind        string            // pg_class.relkind, "" when missing
	columns     map[string]string // name → describeColumn
	constraints map[string]string // name → pg_get_constraintdef
	indexes     map[string]string // name → normalised pg_get_indexdef
	// partKey is pg_get_partkeydef and defaultPartition the name of the
	// default partition ("" when none), for a partitioned table.
	partKey, defaultPartition string
}

// relOID selects the oid of the relation named $1.$2 without needing any
// privilege on it (to_regclass would need USAGE on the schema).
const relOID = `(SELECT c.oid FROM pg_catalog.pg_class c
	JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	WHERE n.nspname = $1 AND c.relname = $2)`

const (
	queryKind = `SELECT c.relkind::text FROM pg_catalog.pg_class c WHERE c.oid = ` + relOID

	queryColumns = `SELECT a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull,
	CASE a.attidentity WHEN 'a' THEN '` + identityAlways + `' WHEN 'd' THEN '` + identityByDef + `'
		ELSE coalesce(pg_catalog.pg_get_expr(d.adbin, d.adrelid), '') END
	FROM pg_catalog.pg_attribute a
	LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	WHERE a.attrelid = ` + relOID + ` AND a.attnum > 0 AND NOT a.attisdropped`

	queryConstraints = `SELECT conname::text, pg_catalog.pg_get_constraintdef(oid)
	FROM pg_catalog.pg_constraint WHERE conrelid = ` + relOID

	queryIndexes = `SELECT i.relname::text, pg_catalog.pg_get_indexdef(x.indexrelid), x.indisunique, x.indisvalid
	FROM pg_catalog.pg_index x JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid
	WHERE x.indrelid = ` + relOID

	queryFunctions = `SELECT p.proname::text, pg_catalog.pg_get_function_identity_arguments(p.oid), p.prosecdef
	FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
	WHERE n.nspname = $1 AND p.proname = ANY($2::text[])`

	queryPartitioning = `SELECT pg_catalog.pg_get_partkeydef(p.partrelid), coalesce(d.relname::text, '')
	FROM pg_catalog.pg_partitioned_table p LEFT JOIN pg_catalog.pg_class d ON d.oid = p.partdefid
	WHERE p.partrelid = ` + relOID
)

// readCatalogWithin runs readCatalog waiting at most wait for each lock;
// a lock that stayed held gives a *VerifyLockError. It reads in a
// transaction of its own, or, when the caller's conn is already in one, in
// a savepoint of it, which it rolls back to: the caller's transaction,
// its locks and its settings stay as they were.
func readCatalogWithin(ctx context.Context, conn *pgx.Conn, names sqlname.Names, spec schemaSpec, wait time.Duration) (*catalog, error) {
	end, err := beginRead(ctx, conn)
	if err != nil {
		return nil, err
	}
	defer end()
	timeout := fmt.Sprintf("%dms", max(wait.Milliseconds(), 1)) // 0 would mean no limit
	if _, err := conn.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", timeout); err != nil {
		return nil, err
	}
	cat, err := readCatalog(ctx, conn, names, spec)
	if pgerr.Code(err) == pgerr.LockNotAvailable {
		end()
		return nil, lockError(ctx, conn, names, wait, err)
	}
	return cat, err
}

// verifySavepoint is the savepoint Verify reads in when its caller's
// connection is in a transaction.
const verifySavepoint = "pgoutbox_verify"

// beginRead starts Verify's reads on conn: a transaction, or a savepoint
// when conn is in a transaction already. The function it returns undoes
// it (ROLLBACK, or ROLLBACK TO and RELEASE the savepoint), once however
// often it is called, and even when ctx has ended.
func beginRead(ctx context.Context, conn *pgx.Conn) (func(), error) {
	begin, end := []string{"BEGIN"}, []string{"ROLLBACK"}
	if conn.PgConn().TxStatus() != 'I' {
		begin = []string{"SAVEPOINT " + verifySavepoint}
		end = []string{"ROLLBACK TO SAVEPOINT " + verifySavepoint, "RELEASE SAVEPOINT " + verifySavepoint}
	}
	if _, err := conn.Exec(ctx, begin[0]); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			for _, sql := range end {
				if _, err := conn.Exec(context.WithoutCancel(ctx), sql); err != nil {
					return
				}
			}
		})
	}, nil
}

// readCatalog reads everything Verify compares: one batch of catalog
// queries, then the version table when it exists.
func readCatalog(ctx context.Context, conn *pgx.Conn, names sqlname.Names, spec schemaSpec) (*catalog, error) {
	schema := names.Table.Schema
	b := &pgx.Batch{}
	cat := &catalog{functions: map[string]string{}}
	var versionKind string
	fns := make([]string, len(spec.functions))
	for i, f := range spec.functions {
		fns[i] = names.Object(f.suffix)
	}
	b.Queue(queryFunctions, schema, fns).Query(func(rows pgx.Rows) error { return readFunctions(rows, cat.functions) })
	for _, ts := range spec.tables {
		cat.tables = append(cat.tables, queueTable(b, schema, names.Object(ts.suffix)))
	}
	if spec.kind == outbox.KindLog {
		cat.log = queueLogParts(b, names)
	}
	b.Queue(queryKind, schema, names.Object(sqlname.SuffixVersion)).QueryRow(func(r pgx.Row) error { return scanOptional(r, &versionKind) })
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("read catalog: %w", err)
	}
	if cat.log != nil {
		if err := cat.log.readTicks(ctx, conn, names, cat.tables); err != nil {
			return nil, err
		}
	}
	v, err := readVersion(ctx, conn, names, versionKind)
	cat.version = v
	return cat, err
}

// queueTable queues the catalog queries of the table schema.table on b
// and returns what they will fill in.
func queueTable(b *pgx.Batch, schema, table string) *tableCatalog {
	tc := &tableCatalog{columns: map[string]string{}, constraints: map[string]string{}, indexes: map[string]string{}}
	b.Queue(queryKind, schema, table).QueryRow(func(r pgx.Row) error { return scanOptional(r, &tc.kind) })
	b.Queue(queryColumns, schema, table).Query(func(rows pgx.Rows) error { return readColumns(rows, tc.columns) })
	b.Queue(queryConstraints, schema, table).Query(func(rows pgx.Rows) error { return readPairs(rows, tc.constraints) })
	b.Queue(queryIndexes, schema, table).Query(func(rows pgx.Rows) error { return readIndexes(rows, tc.indexes) })
	b.Queue(queryPartitioning, schema, table).QueryRow(func(r pgx.Row) error {
		if err := r.Scan(&tc.partKey, &tc.defaultPartition); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		return nil
	})
	return tc
}

// scanOptional scans one text column, leaving dst empty when there is no row.
func scanOptional(r pgx.Row, dst *string) error {
	if err := r.Scan(dst); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	return nil
}

// readFunctions fills dst with name → describeFunction.
func readFunctions(rows pgx.Rows, dst map[string]string) error {
	var name, args string
	var definer bool
	_, err := pgx.ForEachRow(rows, []any{&name, &args, &definer}, func() error {
		dst[name] = describeFunction(args, definer)
		return nil
	})
	return err
}

func readColumns(rows pgx.Rows, dst map[string]string) error {
	var name, typ, def string
	var notNull bool
	_, err := pgx.ForEachRow(rows, []any{&name, &typ, &notNull, &def}, func() error {
		dst[name] = describeColumn(typ, notNull, def)
		return nil
	})
	return err
}

func readPairs(rows pgx.Rows, dst map[string]string) error {
	var name, def string
	_, err := pgx.ForEachRow(rows, []any{&name, &def}, func() error {
		dst[name] = def
		return nil
	})
	return err
}

func readIndexes(rows pgx.Rows, dst map[string]string) error {
	var name, def string
	var unique, valid bool
	_, err := pgx.ForEachRow(rows, []any{&name, &def, &unique, &valid}, func() error {
		dst[name] = normaliseIndexDef(def, unique, valid)
		return nil
	})
	return err
}

// invalidMark ends the definition of an index PostgreSQL does not use (a
// CREATE INDEX CONCURRENTLY that failed or is running).
const invalidMark = " (INVALID)"

// normaliseIndexDef keeps what matters of pg_get_indexdef's output: the
// access method, key columns and predicate, without the index and table
// names (whose schema qualification depends on search_path).
func normaliseIndexDef(def string, unique, valid bool) string {
	if _, after, ok := strings.Cut(def, " USING "); ok {
		def = after
	}
	if unique {
		def = "UNIQUE " + def
	}
	if !valid {
		def += invalidMark
	}
	return def
}

// readVersion returns the applied version as text, or what is wrong with
// the version table.
func readVersion(ctx context.Context, conn *pgx.Conn, names sqlname.Names, kind string) (string, error) {
	if kind == "" {
		return "missing", nil
	}
	var v int32
	err := conn.QueryRow(ctx, "SELECT version FROM "+names.VersionTable).Scan(&v)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "no row", nil
	case err != nil:
		return "", fmt.Errorf("read version: %w", err)
	}
	return strconv.Itoa(int(v)), nil
}

// compare lists the differences between cat and the expected schema.
func (cat *catalog) compare(names sqlname.Names, spec schemaSpec) []Problem {
	if p, wrong := cat.tables[0].wrongKind(names, spec.kind); wrong {
		return []Problem{p} // one clear problem rather than every column
	}
	var ps []Problem
	add := func(object, expected, actual string) {
		if expected != actual {
			ps = append(ps, Problem{Object: object, Expected: expected, Actual: actual})
		}
	}
	for i, ts := range spec.tables {
		if i > 0 && cat.tables[0].kind == "" {
			break // nothing was migrated: the outbox table's absence says it
		}
		cat.tables[i].compare(names, ts, add)
	}
	if cat.tables[0].kind != "" {
		for _, f := range spec.functions {
			n := names.Object(f.suffix)
			add("function "+names.Table.Schema+"."+n, describeFunction(f.args, true), orMissing(cat.functions, n))
		}
		if cat.log != nil {
			cat.log.compare(names, cat.tables, add)
		}
	}
	add("version table "+names.Table.Schema+"."+names.Object(sqlname.SuffixVersion),
		strconv.Itoa(int(spec.latest)), versionVerdict(cat.version, spec.latest))
	return ps
}

// compare adds the differences between tc and spec, one table of names.
func (tc *tableCatalog) compare(names sqlname.Names, spec tableSpec, add func(object, expected, actual string)) {
	schema := names.Table.Schema
	t := schema + "." + names.Object(spec.suffix)
	add("table "+t, relkindName(spec.kind), relkindName(tc.kind))
	if tc.kind == "" {
		return
	}
	for _, c := range spec.columns {
		add("column "+t+"."+c.name, c.describe(), orMissing(tc.columns, c.name))
	}
	for _, c := range spec.constraints {
		n := names.Object(c.suffix)
		add("constraint "+n+" on "+t, c.def, orMissing(tc.constraints, n))
	}
	for _, ix := range spec.indexes {
		n := names.Object(ix.suffix)
		actual := orMissing(tc.indexes, n)
		if optionalIndexes[ix.suffix] && (actual == "missing" || strings.HasSuffix(actual, invalidMark)) {
			continue
		}
		add("index "+schema+"."+n, ix.def, actual)
	}
	if spec.partitionKey != "" && tc.kind == spec.kind {
		add("partition key of "+t, spec.partitionKey, tc.partKey)
		if spec.noDefaultPartition {
			add("default partition of "+t, "none", cmp.Or(tc.defaultPartition, "none"))
		} else {
			add("default partition of "+t, schema+"."+names.Object(spec.defaultPartition), orMissingName(schema, tc.defaultPartition))
		}
	}
}

// orMissingName returns schema.name, or "missing" when name is empty.
func orMissingName(schema, name string) string {
	if name == "" {
		return "missing"
	}
	return schema + "." + name
}

func orMissing(m map[string]string, key string) string {
	if v, ok := m[key]; ok {
		return v
	}
	return "missing"
}

// versionVerdict adds what to do to a version that is not the latest.
func versionVerdict(v string, latest int32) string {
	n, err := strconv.Atoi(v)
	switch {
	case err != nil || n < int(latest):
		return v + " (run Migrate)"
	case n > int(latest):
		return v + " (newer than this library knows: upgrade pgoutbox)"
	}
	return v
}

// versionNewer reports whether v is a version newer than latest.
func versionNewer(v string, latest int32) bool {
	n, err := strconv.Atoi(v)
	return err == nil && n > int(latest)
}

func relkindName(kind string) string {
	switch kind {
	case "":
		return "missing"
	case "r":
		return "table"
	case "p":
		return "partitioned table"
	case "v":
		return "view"
	case "m":
		return "materialized view"
	case "f":
		return "foreign table"
	}
	return "relation of kind " + kind
}
