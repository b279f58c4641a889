package pgoutboxtest

import (
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// DB is what the assertions read through: a pgx.Tx, to see what the
// transaction wrote before it commits, or a *pgxpool.Pool or *pgx.Conn,
// to see committed rows. The assertions only read.
type DB interface {
	// Query runs a read-only statement; pgx.Tx, *pgx.Conn and
	// *pgxpool.Pool implement it.
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// rowColumns are the columns a row is scanned from, in scanRow's order.
const rowColumns = `id, seq, event_type, coalesce(aggregate_type, ''), coalesce(aggregate_id, ''),
	coalesce(partition_key, ''), coalesce(idempotency_key, ''), coalesce(content_type, ''),
	payload, headers, status, created_at`

// shownRows is how many rows a failure message lists at most.
const shownRows = 20

// eventColumns are the columns of an event that rowColumns reads, in each
// of the tables an event lives in.
const eventColumns = `id, seq, event_type, aggregate_type, aggregate_id, partition_key, idempotency_key,
	content_type, payload, headers, status, created_at`

// reader reads one outbox: its table of events to deliver, its dead
// letters (FAILED events) and its SENT history (schema version 10 on).
type reader struct {
	table    outbox.Table // defaulted and validated
	ofTypes  string       // rows of the types in $1 (all when $1 is NULL), in emit order
	latest   string       // the last $1 rows, newest first, each with the outbox's row count
	busyRows string       // the first $1 rows due or in flight, in emit order
}

// newReader builds the statements for table, or says why its name is
// invalid.
func newReader(table outbox.Table) (reader, error) {
	names, err := sqlname.For(table)
	if err != nil {
		return reader{}, fmt.Errorf("the outbox table is invalid: %w", err)
	}
	t := names.Qualified
	// every event, wherever it is: a dispatched event has left the
	// outbox table for the history or the dead letters.
	all := fmt.Sprintf(`(SELECT %[1]s FROM %[2]s UNION ALL SELECT %[1]s FROM %[3]s UNION ALL SELECT %[1]s FROM %[4]s) AS e`,
		eventColumns, t, names.Dead, names.Sent)
	return reader{
		table: names.Table,
		ofTypes: fmt.Sprintf(`SELECT %s FROM %s WHERE $1::text[] IS NULL OR event_type = ANY($1::text[]) ORDER BY seq`,
			rowColumns, all),
		latest: fmt.Sprintf(`SELECT %s, count(*) OVER () FROM %s ORDER BY seq DESC LIMIT $1`, rowColumns, all),
		busyRows: fmt.Sprintf(`SELECT %s FROM %s
WHERE status = 'PROCESSING' OR (status = 'PENDING' AND next_attempt_at <= now()) ORDER BY seq LIMIT $1`, rowColumns, t),
	}, nil
}

// rowsOfTypes returns the rows whose type is in types, or every row when
// types is nil, in emit order.
func (r reader) rowsOfTypes(ctx context.Context, db DB, types []string) ([]row, error) {
	return r.collect(ctx, db, r.ofTypes, types)
}

// collect runs a statement of rowColumns with its one argument.
func (r reader) collect(ctx context.Context, db DB, sql string, arg any) ([]row, error) {
	rows, err := db.Query(ctx, sql, arg)
	if err != nil {
		return nil, r.readError(err)
	}
	out, err := pgx.CollectRows(rows, scanRow)
	if err != nil {
		return nil, r.readError(err)
	}
	return out, nil
}

// latestRows returns the last n rows in emit order, and how many rows the
// table holds.
func (r reader) latestRows(ctx context.Context, db DB, n int) ([]row, int64, error) {
	rows, err := db.Query(ctx, r.latest, n)
	if err != nil {
		return nil, 0, r.readError(err)
	}
	defer rows.Close()
	var out []row
	var total int64
	for rows.Next() {
		var x row
		if err := rows.Scan(append(x.targets(), &total)...); err != nil {
			return nil, 0, r.readError(err)
		}
		out = append(out, x)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, r.readError(err)
	}
	slices.Reverse(out)
	return out, total, nil
}

// busy returns the first n rows that keep the table from being idle: due
// PENDING rows and PROCESSING rows.
func (r reader) busy(ctx context.Context, db DB, n int) ([]row, error) {
	return r.collect(ctx, db, r.busyRows, n)
}

func (r reader) readError(err error) error {
	return fmt.Errorf("read %s: %w", r.table, err)
}

func scanRow(s pgx.CollectableRow) (row, error) {
	var x row
	err := s.Scan(x.targets()...)
	return x, err
}

// targets are the scan destinations of rowColumns, in order.
func (x *row) targets() []any {
	e := &x.event
	return []any{&e.ID, &x.seq, &e.Type, &e.AggregateType, &e.AggregateID, &e.PartitionKey,
		&e.IdempotencyKey, &e.ContentType, &e.Payload, &e.Headers, &x.status, &e.CreatedAt}
}

// describe prints r on one line: seq, ID, type, status, payload excerpt.
func (x row) describe() string {
	return fmt.Sprintf("seq %d  id %s  type %q  %s  payload %s",
		x.seq, x.event.ID, x.event.Type, x.status, excerpt(x.event.Payload))
}

// listRows prints rows one per line, indented, each followed by how it
// differs from m when m is not nil.
func listRows(b *strings.Builder, rows []row, m *matcher) {
	for _, x := range rows {
		b.WriteString("\n    ")
		b.WriteString(x.describe())
		if m == nil {
			continue
		}
		if d := m.differences(x); len(d) > 0 {
			b.WriteString("\n        differs: " + strings.Join(d, "; "))
		}
	}
}

// excerptBytes is the most payload bytes a failure message shows.
const excerptBytes = 64

// excerpt shows the start of a payload: its text when it is UTF-8 (cut at
// excerptBytes, with its full length), otherwise its length and first
// bytes in hex.
func excerpt(b []byte) string {
	if len(b) == 0 {
		return "(empty)"
	}
	cut := min(len(b), excerptBytes)
	if !utf8.Valid(b) {
		return fmt.Sprintf("(%d bytes, not UTF-8: %s…)", len(b), hex.EncodeToString(b[:min(cut, 16)]))
	}
	for cut < len(b) && !utf8.RuneStart(b[cut]) {
		cut--
	}
	s := string(b[:cut])
	if strconv.CanBackquote(s) {
		s = "`" + s + "`"
	} else {
		s = strconv.Quote(s)
	}
	if cut < len(b) {
		s += fmt.Sprintf("… (%d bytes)", len(b))
	}
	return s
}

// events says "1 event" or "n events".
func events(n int) string {
	if n == 1 {
		return "1 event"
	}
	return fmt.Sprintf("%d events", n)
}
