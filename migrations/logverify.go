package migrations

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// logCatalog is what Verify reads of a log besides its tables: whether a
// part holds the next transaction id, and its ticks and ticker row.
type logCatalog struct {
	xmax    string // pg_snapshot_xmax of Verify's snapshot: the next xid
	partFor bool   // some part holds xmax
	lastHi  string // the largest upper bound of a part, "" when none
	// ticks and tickerRows count the rows of the ticks and the ticker;
	// -1 when they were not read (a table missing, or no SELECT on it).
	ticks, tickerRows int64
}

// queryLogParts reads the next transaction id and the bounds of the
// log's parts (pg_get_expr prints FOR VALUES FROM ('lo') TO ('hi')). It
// assigns no transaction id and needs no privilege on the log.
const queryLogParts = `WITH x AS (SELECT pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::text::numeric AS xmax),
b AS (SELECT m[1]::numeric AS lo, m[2]::numeric AS hi
	FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid,
	LATERAL regexp_match(pg_catalog.pg_get_expr(c.relpartbound, c.oid), $re$FROM \('(\d+)'\) TO \('(\d+)'\)$re$) AS m
	WHERE i.inhparent = ` + relOID + `)
SELECT x.xmax::text, coalesce(bool_or(b.lo <= x.xmax AND x.xmax < b.hi), false), coalesce(max(b.hi)::text, '')
FROM x LEFT JOIN b ON true GROUP BY x.xmax`

// queueLogParts queues the parts query on b.
func queueLogParts(b *pgx.Batch, names sqlname.Names) *logCatalog {
	lc := &logCatalog{ticks: -1, tickerRows: -1}
	b.Queue(queryLogParts, names.Table.Schema, names.Table.Name).QueryRow(func(r pgx.Row) error {
		return r.Scan(&lc.xmax, &lc.partFor, &lc.lastHi)
	})
	return lc
}

// readTicks counts the ticks and the ticker's rows when both tables exist
// and Verify's role may read them (a role with USAGE on the schema only
// skips these two checks).
func (lc *logCatalog) readTicks(ctx context.Context, conn *pgx.Conn, names sqlname.Names, tables []*tableCatalog) error {
	ticks, ticker := names.Log(sqlname.SuffixTicks), names.Log(sqlname.SuffixTicker)
	if tables[logTableIndex(sqlname.SuffixTicks)].kind != "r" || tables[logTableIndex(sqlname.SuffixTicker)].kind != "r" {
		return nil
	}
	var readable bool
	err := conn.QueryRow(ctx, `SELECT pg_catalog.has_table_privilege($1, 'SELECT') AND pg_catalog.has_table_privilege($2, 'SELECT')`,
		ticks, ticker).Scan(&readable)
	if err != nil || !readable {
		return err
	}
	err = conn.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+ticks+"), (SELECT count(*) FROM "+ticker+")").
		Scan(&lc.ticks, &lc.tickerRows)
	if err != nil {
		return fmt.Errorf("read ticks: %w", err)
	}
	return nil
}

// logTableIndex returns the position of the log's table with suffix in
// logTables.
func logTableIndex(suffix string) int {
	for i, t := range logTables {
		if t.suffix == suffix {
			return i
		}
	}
	panic("migrations: no log table " + suffix)
}

// compare adds the log's own problems: no part for new transactions,
// no tick, no ticker row.
func (lc *logCatalog) compare(names sqlname.Names, tables []*tableCatalog, add func(object, expected, actual string)) {
	t := names.Table.String()
	if tables[0].kind == "p" {
		actual := "a part for xid " + lc.xmax
		if !lc.partFor {
			actual = "no partition for new transactions (" + lastPart(lc.lastHi) + "; add one with " +
				names.Object(sqlname.SuffixPartAdd) + " or run the relay's ticker)"
		}
		add("partitions of "+t, "a part for xid "+lc.xmax, actual)
	}
	if lc.ticks == 0 {
		add("ticks of "+t, "at least the baseline tick", "none (the log was not migrated by Migrate: run it)")
	}
	if lc.tickerRows >= 0 && lc.tickerRows != 1 {
		add("ticker row of "+t, "1 row", fmt.Sprintf("%d rows", lc.tickerRows))
	}
}

// lastPart says where the last part ends.
func lastPart(hi string) string {
	if hi == "" {
		return "no part is attached"
	}
	return "the last part ends below xid " + hi
}

// wrongKind reports, as one Problem, a table of the other kind than
// want: a log verified as an outbox (it is partitioned and has xid) or
// an outbox verified as a log (it has status).
func (tc *tableCatalog) wrongKind(names sqlname.Names, want outbox.TableKind) (Problem, bool) {
	_, hasXid := tc.columns["xid"]
	_, hasStatus := tc.columns["status"]
	object := "table " + names.Table.String()
	switch {
	case want == outbox.KindOutbox && tc.kind == "p" && hasXid && !hasStatus:
		return Problem{Object: object, Expected: "an outbox", Actual: "a log (table is a log, not an outbox: verify it with Kind outbox.KindLog)"}, true
	case want == outbox.KindLog && tc.kind == "r" && hasStatus && !hasXid:
		return Problem{Object: object, Expected: "a log", Actual: "an outbox (table is an outbox, not a log: verify it with Kind outbox.KindOutbox)"}, true
	}
	return Problem{}, false
}
