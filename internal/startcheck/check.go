package startcheck

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/tmplmigrate"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// startRetryFor bounds how long the start-up checks try again after the
// connection was lost (a server restarting, a backend terminated); other
// errors are not tried again.
const startRetryFor = 10 * time.Second

// Config is what the start-up checks need: the dispatcher's pool and
// store, the few settings of its Config they read, its logger and clock,
// and two callbacks.
type Config struct {
	// Pool runs the checks' statements.
	Pool *pgxpool.Pool
	// Store reads the role's privileges and the table's columns.
	Store *lease.Store
	// Table is the outbox table.
	Table outbox.Table
	// Owner names the dispatcher in the logs.
	Owner string
	// Logger receives the checks' warnings and notes.
	Logger *slog.Logger
	// PerKey is true for Ordering PerKey: the checks then make sure the
	// order index is valid (building it when it is not).
	PerKey bool
	// DeleteSent, KeepSent and RetainFailed are the dispatcher's settings
	// of those names: they decide which privileges it needs.
	DeleteSent, KeepSent bool
	RetainFailed         time.Duration
	// SkipVerify skips the schema check (migrations.Verify).
	SkipVerify bool
	// PollInterval caps the wait between tries after a lost connection
	// (at least 50ms).
	PollInterval time.Duration
	// OpTimeout bounds the schema check, as each of the dispatcher's own
	// statements is bounded.
	OpTimeout time.Duration
	// Now is the clock.
	Now func() time.Time
	// EnsurePartitionsFunc, when set, is called once the table, its
	// columns, the order index and the privileges passed: it creates the
	// SENT history's partitions ahead (retention's start-up part).
	EnsurePartitionsFunc func(ctx context.Context, names sqlname.Names)
	// UnverifiedFunc, when set, is called when the start goes on without
	// the schema check (it ran out of time twice), for Health.
	UnverifiedFunc func()
}

// Checker runs the start-up checks of one dispatcher.
type Checker struct {
	cfg Config
}

// New returns a Checker of cfg.
func New(cfg Config) *Checker {
	return &Checker{cfg: cfg}
}

// Run runs the start-up checks (checkTable) and returns nil or the error
// that refuses the start. It runs them again after a connection lost
// under them, waiting 50ms doubling up to PollInterval between tries, for at
// most startRetryFor: a database that restarts, or a pooler that drops a
// server connection, as the dispatcher starts must not fail the start
// (a replica restarted during an outage would otherwise exit again).
func (c *Checker) Run(ctx context.Context) error {
	deadline := c.cfg.Now().Add(startRetryFor)
	wait := 50 * time.Millisecond
	lost := false // a connection was lost: the server may be restarting
	for {
		err := c.checkTable(ctx)
		lost = lost || err != nil && connectionLost(err)
		if err == nil || !connectionLost(err) && !(lost && notMade(err)) {
			return err
		}
		if ctx.Err() != nil || c.cfg.Now().Add(wait).After(deadline) {
			return err
		}
		c.cfg.Logger.Warn("pgoutbox: start-up check lost its connection; trying again",
			"table", c.cfg.Table.String(), "owner", c.cfg.Owner, "error", err, "in", wait)
		if tmplmigrate.Sleep(ctx, wait) != nil {
			return err
		}
		wait = min(2*wait, max(c.cfg.PollInterval, 50*time.Millisecond))
	}
}

// connectionLost reports whether err says that an established connection
// to the server was lost: a connection exception (class 08), the server
// shutting down or terminating the backend (57P01, 57P02), the
// connection breaking under a statement, or nothing sent on it. A
// connection that could not be made (a wrong password, a refused port)
// is not tried again, unless the server said it is starting up (57P03)
// or reset the connection while it was being made (a server shutting
// down): a start must report a bad configuration at once. The checks read,
// and the order index's build (PerKey only) is idempotent, so trying them
// again is safe.
func connectionLost(err error) bool {
	code := pgerr.Code(err)
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return code == "57P03" || code == "" && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF))
	}
	var netErr net.Error
	return strings.HasPrefix(code, "08") || code == "57P01" || code == "57P02" || code == "57P03" ||
		pgconn.SafeToRetry(err) || errors.As(err, &netErr) || errors.Is(err, io.ErrUnexpectedEOF)
}

// notMade reports whether err is a connection that could not be made with
// no word from the server (refused, unreachable): after a lost connection
// that is a server restarting, and the start tries again; a wrong
// password or a missing database has a code and is never tried again.
func notMade(err error) bool {
	var connectErr *pgconn.ConnectError
	return errors.As(err, &connectErr) && pgerr.Code(err) == ""
}

// checkTable fails fast when the outbox table or its schema is missing,
// when the schema does not match what this version needs (Verify, unless
// SkipVerify), when the table lacks a column this version uses (a
// migration not yet run), when Ordering PerKey finds no valid order index
// (checkOrderIndex), or when the role lacks a privilege the
// configuration needs or its transactions do not start at READ COMMITTED
// (checkAccess), rather than logging the same claim error every poll.
func (c *Checker) checkTable(ctx context.Context) error {
	names, err := sqlname.For(c.cfg.Table)
	if err != nil {
		return err
	}
	var exists bool
	err = c.cfg.Pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", names.Qualified).Scan(&exists)
	if err != nil {
		return errtext.Wrap(err, "dispatcher: check table")
	}
	if !exists {
		return errtext.WrapHint(outbox.ErrMissingTable, "is it the Table given to migrations.Migrate?",
			"dispatcher: %s", c.cfg.Store.Table())
	}
	err = c.verify(ctx)
	timedOut := pgerr.RanOutOfTime(err) && ctx.Err() == nil
	if err != nil && !timedOut {
		return err
	}
	// The column check ran out of time only under a statement_timeout
	// shorter than a catalog read: it is skipped then (statement timeouts
	// must never stop progress), and a missing column shows in the
	// claims' errors instead.
	if err := c.cfg.Store.CheckColumns(ctx, c.cfg.Pool); err != nil && !(pgerr.RanOutOfTime(err) && ctx.Err() == nil) {
		return err
	}
	if err := c.checkOrderIndex(ctx, names); err != nil {
		return err
	}
	if err := c.checkAccess(ctx); err != nil {
		return err
	}
	if c.cfg.EnsurePartitionsFunc != nil {
		c.cfg.EnsurePartitionsFunc(ctx, names)
	}
	if timedOut { // once more, with a fresh timeout
		return c.verifyAgain(ctx)
	}
	return nil
}

// verifyAgain runs the schema check a second time after the first ran out
// of time. When this one runs out of time too it logs a warning that says
// how to fix it, notes it in Health, and lets the start go on: statement
// timeouts must never stop progress.
func (c *Checker) verifyAgain(ctx context.Context) error {
	err := c.verify(ctx)
	if !pgerr.RanOutOfTime(err) || ctx.Err() != nil {
		return err
	}
	if c.cfg.UnverifiedFunc != nil {
		c.cfg.UnverifiedFunc()
	}
	c.cfg.Logger.Warn("pgoutbox: could not verify the outbox schema in time; starting without that check",
		"table", c.cfg.Table.String(), "owner", c.cfg.Owner, "error", err,
		"fix", "raise statement_timeout for the dispatcher's role, or set Config.SkipVerify")
	return nil
}

// verify compares the table's schema with what this version needs
// (migrations.Verify), bounded like the dispatcher's own statements. A
// schema version newer than this library knows is no reason to refuse: a
// later release migrated the table (a rolling upgrade). Then only an
// object this version relies on that is missing refuses the start; the
// definitions that differ are logged at INFO. Nor is a check that ran out
// of time (a statement_timeout, a lock held on the table): statement
// timeouts must never stop progress, so checkTable checks the columns the
// dispatcher uses, tries once more, and then goes on without it (see
// verifyAgain).
func (c *Checker) verify(parent context.Context) error {
	if c.cfg.SkipVerify {
		return nil
	}
	ctx, cancel := context.WithTimeout(parent, c.cfg.OpTimeout)
	defer cancel()
	err := migrations.Verify(ctx, c.cfg.Pool, migrations.Config{Table: c.cfg.Table})
	var mismatch *migrations.VerifyError
	switch {
	case errors.As(err, &mismatch) && mismatch.NewerCompatible():
		c.cfg.Logger.Info("pgoutbox: the outbox schema is newer than this version of pgoutbox; dispatching on it",
			"table", c.cfg.Table.String(), "owner", c.cfg.Owner, "schema", mismatch.Problems[len(mismatch.Problems)-1].Actual,
			"differences", newerDifferences(mismatch))
		return nil
	case mismatch != nil:
		return errtext.WrapHint(err, "Config.SkipVerify starts without this check", "")
	case pgerr.Code(err) == pgerr.InsufficientPrivilege:
		return errtext.WrapHint(err, "the dispatcher's role needs SELECT on the version table, as "+
			"migrations.RenderGrants grants, or set Config.SkipVerify", "")
	}
	return err
}

// newerDifferences lists the definitions of a newer schema that differ
// from what this version expects (all problems but the version's, last).
func newerDifferences(e *migrations.VerifyError) []string {
	diffs := make([]string, 0, len(e.Problems)-1)
	for _, p := range e.Problems[:len(e.Problems)-1] {
		diffs = append(diffs, p.String())
	}
	return diffs
}
