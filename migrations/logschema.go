package migrations

import (
	"io/fs"
	"regexp"
	"strings"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/tmplmigrate"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// This file is schema.go for the log kind (outbox.KindLog,
// migrations/log/*.sql): what the latest log migration leaves in the
// database and what [Verify] checks, in the same words.

// logColumns are the log table's columns in table order: xid defaults to
// exactly pg_current_xact_id() (the writing transaction's top-level id,
// the one every batch is bounded by) and seq is an identity.
var logColumns = []columnSpec{
	{name: "xid", typ: "xid8", notNull: true, def: "pg_current_xact_id()"},
	{name: "seq", typ: "bigint", notNull: true, def: identityAlways},
	{name: "id", typ: "uuid", notNull: true},
	{name: "event_type", typ: "text", notNull: true},
	{name: "aggregate_type", typ: "text"},
	{name: "aggregate_id", typ: "text"},
	{name: "partition_key", typ: "text"},
	{name: "idempotency_key", typ: "text"},
	{name: "content_type", typ: "text"},
	{name: "payload", typ: "bytea"},
	{name: "headers", typ: "jsonb", notNull: true, def: "'{}'::jsonb"},
	{name: "created_at", typ: "timestamp with time zone", notNull: true, def: "now()"},
}

const timestamptz = "timestamp with time zone"

// logTables lists the tables of a log: the log itself (partitioned by
// RANGE (xid), no default partition, one index on xid), its ticks, the
// ticker's lease row, the groups' cursors, parked keys and parked events.
var logTables = []tableSpec{
	{
		kind: "p", partitionKey: "RANGE (xid)", noDefaultPartition: true, columns: logColumns,
		indexes: []indexSpec{{sqlname.SuffixLogXidIndex, "btree (xid)"}},
	},
	{
		suffix: sqlname.SuffixTicks, kind: "r",
		columns: []columnSpec{
			{name: "tick_id", typ: "bigint", notNull: true},
			{name: "snapshot", typ: "pg_snapshot", notNull: true},
			{name: "tick_time", typ: timestamptz, notNull: true, def: "now()"},
			{name: "last_seq", typ: "bigint", notNull: true},
			{name: "sysid", typ: "bigint", notNull: true},
		},
		constraints: []constraintSpec{{sqlname.SuffixTicks + sqlname.SuffixPkey, "PRIMARY KEY (tick_id)"}},
	},
	{
		suffix: sqlname.SuffixTicker, kind: "r",
		columns: []columnSpec{
			{name: "one", typ: "boolean", notNull: true, def: "true"},
			{name: "owner", typ: "text"},
			{name: "token", typ: "uuid"},
			{name: "lease_until", typ: timestamptz},
			{name: "heartbeat_at", typ: timestamptz},
			{name: "next_tick", typ: "bigint", notNull: true},
		},
		constraints: []constraintSpec{{sqlname.SuffixTicker + sqlname.SuffixPkey, "PRIMARY KEY (one)"}},
	},
	{
		suffix: sqlname.SuffixCursors, kind: "r",
		columns: []columnSpec{
			{name: "grp", typ: "text", notNull: true},
			{name: "last_tick", typ: "bigint", notNull: true},
			{name: "batch_tick", typ: "bigint"},
			{name: "batch_seq", typ: "bigint"},
			{name: "owner", typ: "text"},
			{name: "token", typ: "uuid"},
			{name: "lease_until", typ: timestamptz},
			{name: "heartbeat_at", typ: timestamptz},
			{name: "stopped_reason", typ: "text"},
			{name: "created_at", typ: timestamptz, notNull: true, def: "now()"},
			{name: "moved_at", typ: timestamptz, notNull: true, def: "now()"},
		},
		constraints: []constraintSpec{{sqlname.SuffixCursors + sqlname.SuffixPkey, "PRIMARY KEY (grp)"}},
	},
	{
		suffix: sqlname.SuffixParkedKeys, kind: "r",
		columns: []columnSpec{
			{name: "grp", typ: "text", notNull: true},
			{name: "key", typ: "text", notNull: true},
			{name: "parked_at", typ: timestamptz, notNull: true, def: "now()"},
			{name: "error_code", typ: "text"},
			{name: "error", typ: "text"},
			{name: "replay_requested_at", typ: timestamptz},
			{name: "skip_requested_at", typ: timestamptz},
		},
		constraints: []constraintSpec{{sqlname.SuffixParkedKeys + sqlname.SuffixPkey, "PRIMARY KEY (grp, key)"}},
	},
	{
		suffix: sqlname.SuffixParked, kind: "r", columns: parkedColumns(),
		constraints: []constraintSpec{{sqlname.SuffixParked + sqlname.SuffixPkey, "PRIMARY KEY (grp, seq)"}},
		indexes:     []indexSpec{{sqlname.SuffixParkedKeyIdx, "btree (grp, key, seq)"}},
	},
}

// parkedColumns are the parked events' columns: the group, the log's
// columns (seq and xid plain, created_at without default), then why.
func parkedColumns() []columnSpec {
	cols := []columnSpec{{name: "grp", typ: "text", notNull: true}}
	for _, c := range logColumns {
		switch c.name {
		case "xid", "seq", "created_at":
			c.def = ""
		}
		cols = append(cols, c)
	}
	return append(cols,
		columnSpec{name: "key", typ: "text"},
		columnSpec{name: "parked_at", typ: timestamptz, notNull: true, def: "now()"},
		columnSpec{name: "error_code", typ: "text"},
		columnSpec{name: "error", typ: "text"},
	)
}

// logFunction is one SECURITY DEFINER function of a log: its suffix, its
// template key (as in logTemplateData), its arguments as
// pg_get_function_identity_arguments prints them and as GRANT takes
// them, and whether the relay and the operator may call it.
type logFunction struct {
	functionSpec
	key      string // the template key of its name: CREATE FUNCTION {{.key}}(
	types    string // argument types for GRANT ... ON FUNCTION name(types)
	relay    bool
	operator bool
}

// allLogFunctions are the log's functions that this library knows. Only
// those that the log's templates create are expected, granted and
// verified ([logFunctions]); a function a template creates that is not
// listed here fails TestLogFunctionsListed. To change a signature, change
// its line here.
var allLogFunctions = []logFunction{
	{functionSpec{sqlname.SuffixPartAdd, "p_lo xid8"}, "part_add", "xid8", true, true},
	{functionSpec{sqlname.SuffixTick, "p_token uuid, p_idle interval, OUT tick_id bigint, OUT made boolean"}, "tick", "uuid, interval", true, false},
	{functionSpec{sqlname.SuffixPartTruncate, ""}, "part_truncate", "", true, true},
	{functionSpec{sqlname.SuffixTickTrim, "p_limit integer"}, "tick_trim", "integer", true, true},
}

// createdFunction finds the template keys of the functions a template
// creates.
var createdFunction = regexp.MustCompile(`(?i)CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+\{\{\s*\.(\w+)\s*\}\}\s*\(`)

// templateFunctions returns the template keys of the functions the
// templates of fsys create (up parts only).
func templateFunctions(fsys fs.FS) map[string]bool {
	keys := map[string]bool{}
	paths, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		panic(err) // the embedded files are fixed at build time
	}
	for _, p := range paths {
		text, err := fs.ReadFile(fsys, p)
		if err != nil {
			panic(err)
		}
		up, _, _ := strings.Cut(string(text), "---- create above / drop below ----")
		for _, m := range createdFunction.FindAllStringSubmatch(up, -1) {
			keys[m[1]] = true
		}
	}
	return keys
}

// logFunctions are the functions of allLogFunctions that the embedded log
// templates create.
var logFunctions = func() []logFunction {
	created := templateFunctions(logFiles)
	var fns []logFunction
	for _, f := range allLogFunctions {
		if created[f.key] {
			fns = append(fns, f)
		}
	}
	return fns
}()

// schemaSpec is everything Verify expects of one kind of table.
type schemaSpec struct {
	kind      outbox.TableKind
	tables    []tableSpec
	functions []functionSpec
	latest    int32
}

// specFor returns what Verify expects of a table of kind k (valid).
func specFor(k outbox.TableKind) schemaSpec {
	if k == outbox.KindLog {
		fns := make([]functionSpec, len(logFunctions))
		for i, f := range logFunctions {
			fns[i] = f.functionSpec
		}
		return schemaSpec{kind: k, tables: logTables, functions: fns, latest: LatestLog()}
	}
	return schemaSpec{kind: k, tables: expectedTables, functions: expectedFunctions, latest: Latest()}
}

// LatestLog returns the newest schema version of the log kind
// (outbox.KindLog) this library ships, as [Latest] does for the outbox.
// The two kinds version independently; [Version] reads either.
func LatestLog() int32 { return tmplmigrate.Latest(logFiles) }

// LatestFor returns [Latest] for outbox.KindOutbox and [LatestLog] for
// outbox.KindLog, and 0 for another kind.
func LatestFor(kind outbox.TableKind) int32 {
	switch kind {
	case outbox.KindOutbox:
		return Latest()
	case outbox.KindLog:
		return LatestLog()
	}
	return 0
}
