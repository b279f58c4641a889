package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// DefaultTable is the inbox table's name when Config.Table.Name is empty.
const DefaultTable = "outbox_inbox"

// Suffixes of the inbox's own objects, added to the table name like the
// outbox's in internal/sqlname. None is longer than ident.SuffixRoom.
const (
	suffixConsumerCheck = "_consumer_check"
	suffixHashCheck     = "_hash_check"
	suffixProcessedIdx  = "_processed_idx"
)

// Config says which inbox table to use. The zero value is usable.
type Config struct {
	// Table is the inbox table. Defaults to public.outbox_inbox: an empty
	// Schema means "public", an empty Name means [DefaultTable]. Both names
	// must be plain identifiers, and the name at most 48 bytes, as for an
	// outbox table (see [outbox.Table]).
	Table outbox.Table
}

// names applies the defaults and validates the table.
func (c Config) names() (sqlname.Names, error) {
	t := c.Table
	if t.Name == "" {
		t.Name = DefaultTable
	}
	names, err := sqlname.For(t)
	if err != nil {
		return sqlname.Names{}, &outbox.ConfigError{Field: "Table", Reason: "is invalid", Err: err}
	}
	return names, nil
}

// DB is what Purge runs on: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Inbox records the events consumers have processed in one inbox table. It
// holds no connection and no state beyond the SQL text; it is safe for
// concurrent use and cheap to keep for the life of the program.
type Inbox struct {
	table outbox.Table
	sql   statements
}

// New returns an Inbox for cfg. An invalid table name gives an
// *outbox.ConfigError (errors.Is [outbox.ErrInvalidConfig] and
// [outbox.ErrInvalidIdentifier]). New does not touch the database; run
// [Migrate] once to create the table.
func New(cfg Config) (*Inbox, error) {
	names, err := cfg.names()
	if err != nil {
		return nil, err
	}
	return &Inbox{table: names.Table, sql: buildStatements(names.Qualified)}, nil
}

// Table returns the (defaulted) table the inbox records into.
func (ib *Inbox) Table() outbox.Table { return ib.table }

// Result says what Process or Record found.
type Result struct {
	// Duplicate is true when the consumer had already recorded the event
	// with the same content in a committed transaction: the work was not
	// run this time.
	Duplicate bool
	// ProcessedAt is when the event was recorded, by the database clock:
	// the start of the current transaction the first time, the start of
	// the recording transaction for a duplicate.
	ProcessedAt time.Time
}

// statements is the SQL text for one inbox table.
type statements struct {
	insert, lookup, forget, cutoff, purge string
}

func buildStatements(table string) statements {
	return statements{
		insert: `INSERT INTO ` + table + ` (consumer, event_id, payload_hash) VALUES ($1, $2, $3)
ON CONFLICT (consumer, event_id) DO NOTHING RETURNING processed_at`,
		lookup: `SELECT payload_hash, processed_at FROM ` + table + ` WHERE consumer = $1 AND event_id = $2`,
		forget: `DELETE FROM ` + table + ` WHERE consumer = $1 AND event_id = $2`,
		cutoff: `SELECT now() - $1::bigint * interval '1 microsecond'`,
		purge: fmt.Sprintf(`WITH old AS (
	SELECT consumer, event_id FROM %[1]s WHERE processed_at < $1
	ORDER BY processed_at LIMIT $2 FOR UPDATE SKIP LOCKED)
DELETE FROM %[1]s AS i USING old WHERE i.consumer = old.consumer AND i.event_id = old.event_id`, table),
	}
}
