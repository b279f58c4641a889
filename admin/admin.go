package admin

import (
	"context"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/keyorder"
	"github.com/pgoutbox/pgoutbox/internal/purge"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// DB is what the operator statements run on: a *pgxpool.Pool, a *pgx.Conn
// or a pgx.Tx. Begin is used by [Admin.Replay] only, to send the wake-up
// notification in the transaction that replays; in a pgx.Tx it is a
// savepoint, and the notification goes out when the caller commits.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Config says which outbox table to operate on. The zero value is usable.
type Config struct {
	// Table is the outbox table. Defaults to public.outbox_events; see
	// [outbox.Table] for the names it accepts.
	Table outbox.Table
	// Logger receives one Info line per audited action (see [Actor]):
	// who, the action, its filter and the rows it changed, never a
	// payload. Nil logs nothing.
	Logger *slog.Logger
}

// Admin runs the operator statements against one outbox table. It holds
// the database handle and the SQL text, built once with quoted names; it
// keeps no other state and is safe for concurrent use.
type Admin struct {
	db        DB
	table     outbox.Table
	qualified string // the quoted schema.table
	channel   string
	names     sqlname.Names
	sql       statements
	purge     *purge.Store
	logger    *slog.Logger // nil: none
	// betweenSteps, when set, is called before each partition step of an
	// audited SENT purge, when no step holds a lock (a test hook).
	betweenSteps func()
}

// New returns an Admin for cfg on db. A nil db gives an
// *outbox.InputError naming "db" (errors.Is [outbox.ErrInvalidInput]), an
// invalid table name an *outbox.ConfigError naming "Table" (errors.Is
// [outbox.ErrInvalidConfig]). New does not touch the database.
func New(db DB, cfg Config) (*Admin, error) {
	if db == nil {
		return nil, &outbox.InputError{Field: "db", Reason: "is nil"}
	}
	names, err := sqlname.For(cfg.Table)
	if err != nil {
		return nil, &outbox.ConfigError{Field: "Table", Reason: "is invalid", Err: err}
	}
	return &Admin{db: db, table: names.Table, qualified: names.Qualified, channel: names.Channel(),
		names: names, sql: buildStatements(names), purge: purge.New(names), logger: cfg.Logger}, nil
}

// Table returns the (defaulted) table the Admin works on.
func (a *Admin) Table() outbox.Table { return a.table }

// Record is one event row without its payload, headers and attempt log:
// what List returns and what an operator scans. Text columns that are NULL
// in the row are empty strings; timestamps that are NULL are nil.
type Record struct {
	// ID is the event's stable identity.
	ID uuid.UUID `json:"id"`
	// Seq is the row's insertion sequence number; List pages by it.
	Seq int64 `json:"seq"`
	// Type is the event type.
	Type string `json:"type"`
	// AggregateType and AggregateID name the entity the event is about.
	AggregateType string `json:"aggregate_type,omitempty"`
	// AggregateID is the id of the entity the event is about.
	AggregateID string `json:"aggregate_id,omitempty"`
	// PartitionKey is the broker key / ordering key.
	PartitionKey string `json:"partition_key,omitempty"`
	// IdempotencyKey is the caller's own deduplication key.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// ContentType is the payload format.
	ContentType string `json:"content_type,omitempty"`
	// PayloadSize is the payload's length in bytes (the bytes themselves
	// are only in [Detail]).
	PayloadSize int `json:"payload_size"`
	// Status is where the event is in its life.
	Status outbox.Status `json:"status"`
	// Attempts counts delivery attempts that ended.
	Attempts int `json:"attempts"`
	// Recoveries counts expired leases taken back.
	Recoveries int `json:"recoveries"`
	// Snoozes counts the times a handler gave the event back with
	// outbox.Snooze (due again later, no attempt spent).
	Snoozes int `json:"snoozes"`
	// NextAttemptAt is when a PENDING row is due (database clock).
	NextAttemptAt time.Time `json:"next_attempt_at"`
	// LockOwner is the worker that claimed the row last.
	LockOwner string `json:"lock_owner,omitempty"`
	// LockedAt is when the row was claimed last.
	LockedAt *time.Time `json:"locked_at,omitempty"`
	// LeaseUntil is when the current lease expires (PROCESSING rows).
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
	// HeartbeatAt is the current lease's last renewal.
	HeartbeatAt *time.Time `json:"heartbeat_at,omitempty"`
	// LastErrorCode is the stable code of the last failure.
	LastErrorCode outbox.Code `json:"last_error_code,omitempty"`
	// LastError is the last failure's text (at most 2048 characters).
	LastError string `json:"last_error,omitempty"`
	// CreatedAt is when the event was emitted.
	CreatedAt time.Time `json:"created_at"`
	// SentAt is when the event reached SENT.
	SentAt *time.Time `json:"sent_at,omitempty"`
	// FailedAt is when the event reached FAILED.
	FailedAt *time.Time `json:"failed_at,omitempty"`
}

// targets returns the scan destinations of recordColumns, in order.
func (r *Record) targets() []any {
	return []any{&r.ID, &r.Seq, &r.Type, &r.AggregateType, &r.AggregateID, &r.PartitionKey,
		&r.IdempotencyKey, &r.ContentType, &r.PayloadSize, &r.Status, &r.Attempts, &r.Recoveries, &r.Snoozes,
		&r.NextAttemptAt, &r.LockOwner, &r.LockedAt, &r.LeaseUntil, &r.HeartbeatAt,
		&r.LastErrorCode, &r.LastError, &r.CreatedAt, &r.SentAt, &r.FailedAt}
}

// keyOrderOff reports whether the outbox table lacks a valid order index
// (schema version 12 without migrations.Config.KeyOrder): then no
// dispatcher orders per key and nothing is blocked, and the blocked-key
// statements, which probe that index once per key, must not run (each
// probe would scan the table). A table that does not exist has no index
// either: a statement naming it then gives the error the others give
// (SQLSTATE 42P01), rather than "off".
func (a *Admin) keyOrderOff(ctx context.Context) (bool, error) {
	state, err := keyorder.Read(ctx, a.db, a.names)
	if err != nil {
		return false, errtext.Wrap(err, "admin")
	}
	if state == keyorder.Valid {
		return false, nil
	}
	if _, err := a.db.Exec(ctx, "SELECT FROM "+a.qualified+" LIMIT 0"); err != nil {
		return false, errtext.Wrap(err, "admin: %s", a.table)
	}
	return true, nil
}

// withKeyOrder returns on, or off (and true) when the table has no order
// index (keyOrderOff).
func (a *Admin) withKeyOrder(ctx context.Context, on, off string) (string, bool, error) {
	isOff, err := a.keyOrderOff(ctx)
	if isOff {
		return off, true, err
	}
	return on, false, err
}
