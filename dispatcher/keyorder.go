package dispatcher

import (
	"context"
	"errors"
	"fmt"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/keyorder"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
)

// ErrNoOrderIndex is matched by the error Start returns when the
// dispatcher has Ordering PerKey and the outbox table has no valid
// per-key order index (the error is an *OrderIndexError). Since schema
// version 12 the index exists only where migrations.Config.KeyOrder is
// set.
var ErrNoOrderIndex = errors.New("pgoutbox: no order index")

// OrderIndexError says that the outbox table lacks the per-key order
// index that Ordering PerKey reads (its claim probes each key's head
// through it), and how to build it. It matches ErrNoOrderIndex.
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
}

func (e *OrderIndexError) Error() string {
	state, fix := "missing", "run "+e.Create
	if e.Invalid {
		state = "INVALID (a CREATE INDEX CONCURRENTLY that failed or is running)"
		fix = "once no build runs, " + e.Drop + "; then " + e.Create
	}
	return fmt.Sprintf("pgoutbox: dispatcher: Ordering PerKey needs the order index %s of table %s, which is %s "+
		"(set migrations.Config.KeyOrder and run migrations.Migrate, which builds it without blocking writes; or %s; see docs/ordering.md)",
		e.Index, e.Table, state, fix)
}

// Is makes an *OrderIndexError match ErrNoOrderIndex.
func (e *OrderIndexError) Is(target error) bool { return target == ErrNoOrderIndex }

// checkOrderIndex refuses the start of a dispatcher with Ordering PerKey
// on a table without a valid order index (schema version 12 drops it
// unless migrations.Config.KeyOrder). Other dispatchers do not read it.
// A check that runs out of time is skipped, as checkAccess's is:
// statement timeouts must never stop progress.
func (d *Dispatcher) checkOrderIndex(ctx context.Context, names sqlname.Names) error {
	if d.cfg.Ordering != PerKey {
		return nil
	}
	state, err := keyorder.Read(ctx, d.pool, names)
	switch {
	case err != nil && ranOutOfTime(err) && ctx.Err() == nil:
		return nil
	case err != nil:
		return errtext.Wrap(err, "dispatcher: check the order index")
	case state == keyorder.Valid:
		return nil
	}
	return &OrderIndexError{Table: names.Table.String(), Index: names.Table.Schema + "." + names.Object(sqlname.SuffixOrderIndex),
		Invalid: state == keyorder.Invalid, Create: keyorder.Create(names), Drop: keyorder.Drop(names)}
}
