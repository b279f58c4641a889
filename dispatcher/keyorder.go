package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/keyorder"
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
)

// ErrNoOrderIndex is matched by the error Start returns when the
// dispatcher has Ordering PerKey, the outbox table has no valid per-key
// order index, and Start could not build it (the error is an
// *OrderIndexError). Since schema version 12 the index exists only where
// migrations.Config.KeyOrder is set or a PerKey dispatcher built it.
var ErrNoOrderIndex = errors.New("pgoutbox: no order index")

// OrderIndexError says that the outbox table lacks the per-key order
// index that Ordering PerKey reads (its claim probes each key's head
// through it), why Start did not build it, and how to build it. It
// matches ErrNoOrderIndex.
type OrderIndexError struct {
	// Table is the outbox table, schema-qualified.
	Table string
	// Index is the order index, schema-qualified.
	Index string
	// Invalid is true when the index exists but is INVALID (a CREATE
	// INDEX CONCURRENTLY that failed, or one still running); false when
	// it is missing.
	Invalid bool
	// Create is the statement that builds the index without blocking
	// writes, and Drop the one that drops an invalid one first (run each
	// outside a transaction).
	Create, Drop string
	// Cause is why Start's own build failed (the role does not own the
	// table, or the table stayed locked); nil for an invalid index, which
	// Start does not touch.
	Cause error
}

func (e *OrderIndexError) Error() string {
	state, fix := "missing", "run "+e.Create
	if e.Invalid {
		state = "INVALID (a CREATE INDEX CONCURRENTLY that failed or is running)"
		fix = "once no build runs, " + e.Drop + "; then " + e.Create
	}
	msg := fmt.Sprintf("pgoutbox: dispatcher: Ordering PerKey needs the order index %s of table %s, which is %s "+
		"(set migrations.Config.KeyOrder and run migrations.Migrate, which builds it without blocking writes; or %s; see docs/ordering.md)",
		e.Index, e.Table, state, fix)
	if e.Cause != nil {
		msg += "; building it at Start failed: " + e.Cause.Error()
	}
	return msg
}

// Is makes an *OrderIndexError match ErrNoOrderIndex.
func (e *OrderIndexError) Is(target error) bool { return target == ErrNoOrderIndex }

// Unwrap returns Cause.
func (e *OrderIndexError) Unwrap() error { return e.Cause }

// checkOrderIndex makes sure a dispatcher with Ordering PerKey has a
// valid order index (schema version 12 drops it unless
// migrations.Config.KeyOrder): when it is missing, it builds it
// (buildOrderIndex), and when that fails or the index is INVALID it
// refuses the start. Other dispatchers do not read it. A check that runs
// out of time is skipped, as checkAccess's is: statement timeouts must
// never stop progress.
func (d *Dispatcher) checkOrderIndex(ctx context.Context, names sqlname.Names) error {
	if d.cfg.Ordering != PerKey {
		return nil
	}
	state, err := keyorder.Read(ctx, d.pool, names)
	var cause error
	if err == nil && state == keyorder.Missing {
		if cause = d.buildOrderIndex(ctx, names); cause == nil {
			state, err = keyorder.Read(ctx, d.pool, names)
		}
	}
	switch {
	case err != nil && ranOutOfTime(err) && ctx.Err() == nil:
		return nil
	case err != nil:
		return errtext.Wrap(err, "dispatcher: check the order index")
	case state == keyorder.Valid:
		return nil
	}
	return &OrderIndexError{Table: names.Table.String(), Index: names.Table.Schema + "." + names.Object(sqlname.SuffixOrderIndex),
		Invalid: state == keyorder.Invalid, Create: keyorder.Create(names), Drop: keyorder.Drop(names), Cause: cause}
}

// orderIndexLockTimeout bounds how long buildOrderIndex waits for its
// lock on the table, as the migrations' own ALTERs do: writers queue
// behind it meanwhile.
const orderIndexLockTimeout = "2s"

// buildOrderIndex builds the missing order index in a transaction (the
// table's owner may; a least-privilege role gets 42501 and Start refuses
// with the statement to run). The build blocks Emit while it reads the
// outbox table, which holds only the PENDING and PROCESSING rows, and
// waits at most orderIndexLockTimeout for its lock. A replica that built
// it at the same moment wins: the duplicate name error is no failure.
// It logs what it did and how to avoid the block (KeyOrder).
func (d *Dispatcher) buildOrderIndex(ctx context.Context, names sqlname.Names) error {
	began := time.Now()
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+orderIndexLockTimeout+"'"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, keyorder.Build(names))
		return err
	})
	if pgerr.Code(err) == pgerr.UniqueViolation || pgerr.Code(err) == pgerr.DuplicateTable {
		return nil // another replica built it
	}
	if err != nil {
		return err
	}
	d.cfg.Logger.Info("pgoutbox: built the per-key order index that Ordering PerKey reads; set migrations.Config.KeyOrder "+
		"to build it when migrating, without blocking Emit", "table", names.Table.String(), "took", time.Since(began).Round(time.Millisecond))
	return nil
}
