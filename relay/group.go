package relay

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/relay/store"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// From says where a new consumer group starts reading.
type From int

const (
	// Latest (the default) starts at the newest tick: the group publishes
	// the events committed after it, none of those before.
	Latest From = iota
	// Oldest starts at the log's baseline tick: the group publishes every
	// event still in the log (retention may have retired older parts).
	Oldest
)

// String names the choice: "latest" or "oldest".
func (f From) String() string {
	if f == Oldest {
		return "oldest"
	}
	return "latest"
}

// CreateGroup creates the consumer group in log, its cursor at the tick
// from says. It returns ErrGroupExists when the group exists, and an
// *outbox.InputError naming "pool", "log", "group" or "from" for an
// argument it cannot use (nothing was written then). A group holds the
// log's retention until it is dropped: create only the groups a relay
// will read.
func CreateGroup(ctx context.Context, pool *pgxpool.Pool, log outbox.Table, group string, from From) error {
	if from != Latest && from != Oldest {
		return &outbox.InputError{Field: "from", Reason: "must be Latest or Oldest"}
	}
	st, err := groupStoreOf(pool, log, group)
	if err != nil {
		return err
	}
	if err := st.CreateGroup(ctx, group, store.From(from)); err != nil {
		return errtext.Wrap(err, "relay: create group %q in %s", group, log)
	}
	return nil
}

// DropGroup drops the consumer group from log: its cursor, its parked
// keys and events. Retention then no longer waits for it. It returns
// ErrNoGroup when the group does not exist, and an *outbox.InputError
// naming "pool", "log" or "group" for an argument it cannot use. A relay
// still running for the group stops with a lost lease.
func DropGroup(ctx context.Context, pool *pgxpool.Pool, log outbox.Table, group string) error {
	st, err := groupStoreOf(pool, log, group)
	if err != nil {
		return err
	}
	if err := st.DropGroup(ctx, group); err != nil {
		return errtext.Wrap(err, "relay: drop group %q from %s", group, log)
	}
	return nil
}

// groupStoreOf checks the arguments CreateGroup and DropGroup share and
// returns the group store of log.
func groupStoreOf(pool *pgxpool.Pool, log outbox.Table, group string) (groupStore, error) {
	if err := checkGroupArgs(pool != nil, log, group); err != nil {
		return nil, err
	}
	return newGroupStore(pool, log)
}

// checkGroupArgs returns an *outbox.InputError for the first argument of
// CreateGroup or DropGroup it cannot use.
func checkGroupArgs(havePool bool, log outbox.Table, group string) error {
	switch {
	case !havePool:
		return &outbox.InputError{Field: "pool", Reason: "must not be nil"}
	case log.Name == "":
		return &outbox.InputError{Field: "log", Reason: "must name the log table (Name is empty)"}
	}
	if err := log.Validate(); err != nil {
		return &outbox.InputError{Field: "log", Reason: "is invalid", Err: err}
	}
	if p := groupProblem(group); p != "" {
		return &outbox.InputError{Field: "group", Reason: fmt.Sprintf("%s (want 1 to 200 bytes of UTF-8 without NUL)", p)}
	}
	return nil
}
