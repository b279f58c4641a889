package lease

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// DB is what the statements run on: a *pgxpool.Pool, *pgx.Conn or pgx.Tx.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Store runs the lease statements against one outbox table. It holds no
// connection and no state beyond the SQL text; it is safe for concurrent
// use.
type Store struct {
	table outbox.Table
	sql   statements
}

// New returns a Store for the table, after validating its names.
func New(table outbox.Table) (*Store, error) {
	names, err := sqlname.For(table)
	if err != nil {
		return nil, err
	}
	return &Store{table: names.Table, sql: buildStatements(names.Qualified)}, nil
}

// Table returns the (defaulted) table the store works on.
func (s *Store) Table() outbox.Table { return s.table }

// micros converts a duration to whole microseconds for the database.
func micros(d time.Duration) int64 { return d.Microseconds() }
