package retention

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/internal/clock"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// DB is what the service runs its statements on: a *pgxpool.Pool (or a
// *pgx.Conn) outside any transaction, since DETACH PARTITION
// CONCURRENTLY cannot run in a transaction block.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DefaultInterval is Config.Interval's default: a pass a minute.
const DefaultInterval = time.Minute

// DefaultTickBatch is Config.TickBatch's default: ticks deleted per
// statement.
const DefaultTickBatch = 10000

// Config is what the service needs.
type Config struct {
	// DB runs the statements (required).
	DB DB
	// Log is the log table (migrated with outbox.KindLog, version 2 or
	// later).
	Log outbox.Table
	// Interval is the time between passes; zero means DefaultInterval.
	Interval time.Duration
	// TickBatch bounds the ticks one statement deletes; zero means
	// DefaultTickBatch.
	TickBatch int
	// Held, when set, is asked before each pass: the pass runs only
	// when it reports true (the relay passes its ticker's Held: one
	// replica at a time retires). Nil means always.
	Held func() bool
	// OnPass, when set, receives what each pass did.
	OnPass func(Pass)
	// OnError, when set, receives the error of a pass that failed; the
	// service goes on with the next pass.
	OnError func(error)
	// Clock paces the passes; the zero value is the real clock.
	Clock clock.Clock
}

// Pass is what one pass did.
type Pass struct {
	// Truncated is how many retired parts the pass emptied; Busy how many
	// it skipped because another session held them (tried again next
	// pass).
	Truncated, Busy int
	// Dropped is how many empty retired parts it detached and dropped;
	// Waiting how many empty retired parts are left attached (the role
	// does not own the log, or the drop failed).
	Dropped, Waiting int
	// TicksDeleted is how many ticks below every group's cursor tick it
	// deleted.
	TicksDeleted int64
	// Owner says the pass's role owns the log (it may detach and drop).
	Owner bool
}

// Service runs retention passes for one log.
type Service struct {
	cfg   Config
	names sqlname.Names
	// currentLo is the lower bound of the current transaction id's part
	// (currentPartLo; a test moves it).
	currentLo func(context.Context, DB) (uint64, error)
}

// New checks cfg and returns its service; an invalid Log or a missing DB
// gives an *outbox.ConfigError.
func New(cfg Config) (*Service, error) {
	if cfg.DB == nil {
		return nil, &outbox.ConfigError{Field: "DB", Reason: "is required"}
	}
	if cfg.Interval < 0 {
		return nil, &outbox.ConfigError{Field: "Interval", Reason: "must not be negative"}
	}
	if cfg.TickBatch < 0 {
		return nil, &outbox.ConfigError{Field: "TickBatch", Reason: "must not be negative"}
	}
	names, err := sqlname.For(cfg.Log)
	if err != nil {
		return nil, err
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.TickBatch == 0 {
		cfg.TickBatch = DefaultTickBatch
	}
	return &Service{cfg: cfg, names: names, currentLo: currentPartLo}, nil
}

// Run runs a pass every Interval while Held reports true (the first
// after one Interval), until ctx ends; then it returns nil. A failed
// pass goes to OnError and the next one runs as planned.
func (s *Service) Run(ctx context.Context) error {
	for s.cfg.Clock.Sleep(ctx, s.cfg.Interval) == nil {
		if s.cfg.Held != nil && !s.cfg.Held() {
			continue
		}
		p, err := s.Pass(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if s.cfg.OnError != nil {
				s.cfg.OnError(err)
			}
			continue
		}
		if s.cfg.OnPass != nil {
			s.cfg.OnPass(p)
		}
	}
	return nil
}

// Pass runs one pass now, whatever Held says: it truncates the parts
// every group is past, deletes the ticks below every group's cursor
// tick, and, when the role owns the log, detaches and drops the empty
// retired parts below the current transaction id's part. It stops at the
// first error, with what it did so far.
func (s *Service) Pass(ctx context.Context) (Pass, error) {
	var p Pass
	parts, err := truncate(ctx, s.cfg.DB, s.names)
	if err != nil {
		return p, err
	}
	var empty []part
	for _, pt := range parts {
		switch {
		case pt.busy:
			p.Busy++
		case pt.truncated:
			p.Truncated++
			empty = append(empty, pt)
		default:
			empty = append(empty, pt)
		}
	}
	if p.TicksDeleted, err = trimTicks(ctx, s.cfg.DB, s.names, s.cfg.TickBatch); err != nil {
		return p, err
	}
	p.Waiting = len(empty)
	if len(empty) == 0 {
		return p, nil
	}
	if p.Owner, err = ownsLog(ctx, s.cfg.DB, s.names); err != nil || !p.Owner {
		return p, err
	}
	return p, s.drop(ctx, &p, empty)
}

// drop detaches and drops the empty parts below the current transaction
// id's part, counting them in p.
func (s *Service) drop(ctx context.Context, p *Pass, empty []part) error {
	current, err := s.currentLo(ctx, s.cfg.DB)
	if err != nil {
		return err
	}
	var errs []error
	for _, pt := range empty {
		if pt.lo+sqlname.LogPartXids > current || !isPart(s.names, pt.name, pt.lo) {
			continue
		}
		dropped, err := dropPart(ctx, s.cfg.DB, s.names, pt.name)
		if err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		if dropped {
			p.Dropped++
			p.Waiting--
		}
	}
	return errors.Join(errs...)
}
