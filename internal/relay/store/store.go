package store

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// DB is what the store runs its statements on; *pgxpool.Pool satisfies
// it. Move runs a transaction of its own (Begin); every other call is one
// statement, or a few outside any transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Errors the relay's services branch on.
var (
	// ErrLeaseLost: the caller's token does not hold an unexpired lease
	// (of the ticker or of the group), or the cursor is no longer where
	// the caller saw it: nothing was written.
	ErrLeaseLost = errors.New("pgoutbox: relay lease lost")
	// ErrGroupBusy: another owner holds the group's unexpired lease.
	ErrGroupBusy = errors.New("pgoutbox: consumer group is held by another reader")
	// ErrNoGroup: the consumer group does not exist.
	ErrNoGroup = errors.New("pgoutbox: no such consumer group")
	// ErrGroupExists: CreateGroup found the group there already.
	ErrGroupExists = errors.New("pgoutbox: consumer group exists")
	// ErrGroupStopped: the group was stopped (stopped_reason is set) and
	// is read no more until an operator clears it.
	ErrGroupStopped = errors.New("pgoutbox: consumer group is stopped")
	// ErrSnapshotBackwards: a tick's snapshot is older than one recorded
	// or seen before it (a restore of an older backup, a rewritten tick).
	ErrSnapshotBackwards = errors.New("pgoutbox: snapshot went backwards")
)

// SQLSTATEs the tick function raises (migrations/log/001_log.sql).
const (
	codeLeaseLost = "PGR01"
	codeBackwards = "PGR02"
)

// Store runs the relay's statements on one log table.
type Store struct {
	db    DB
	names sqlname.Names
	sql   statements

	mu   sync.Mutex
	seen tickMark // the newest tick any read of this Store saw
}

// tickMark is a tick's id and its snapshot's xmax.
type tickMark struct {
	id   int64
	xmax uint64
}

// New returns a Store on the log table log (validated; its schema must be
// migrated with outbox.KindLog).
func New(db DB, log outbox.Table) (*Store, error) {
	if pgerr.IsNil(db) {
		return nil, &outbox.ConfigError{Field: "DB", Reason: "is nil"}
	}
	names, err := sqlname.For(log)
	if err != nil {
		return nil, err
	}
	return &Store{db: db, names: names, sql: newStatements(names)}, nil
}

// Names returns the log's object names.
func (s *Store) Names() sqlname.Names { return s.names }

// micros is d as whole microseconds, the unit every interval parameter
// is passed in.
func micros(d time.Duration) int64 { return d.Microseconds() }

// mapTickError turns the tick function's SQLSTATEs into the package's
// errors, keeping the *pgconn.PgError in the chain.
func mapTickError(err error) error {
	switch pgerr.Code(err) {
	case codeLeaseLost:
		return errtext.Because(ErrLeaseLost, err)
	case codeBackwards:
		return errtext.Because(ErrSnapshotBackwards, err)
	}
	return err
}
