package store

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/relay/batch"
)

// From says where a new consumer group starts.
type From int

const (
	// Latest starts the group at the newest tick: it reads the events
	// committed after it.
	Latest From = iota
	// Oldest starts the group at the oldest tick kept: it reads every
	// event the log still holds.
	Oldest
)

// ParkedKey is a key a group parks in a cursor move: its events wait in
// the parked table until an operator replays or skips it.
type ParkedKey struct {
	Key string
	// Code is outbox.ErrorCode of the failure that parked it; Err its
	// text (no payload).
	Code, Err string
}

// Lag is how far a group is behind.
type Lag struct {
	// Events is last_seq of the newest tick minus that of the cursor
	// tick (rolled-back inserts count too).
	Events int64
	// Seconds is the age of the first tick after the cursor that holds
	// events; 0 when the group is caught up.
	Seconds float64
	// TickAge is the age of the newest tick.
	TickAge time.Duration
}

// CreateGroup creates a consumer group at the newest tick (Latest) or
// the oldest kept (Oldest). ErrGroupExists when it exists.
func (s *Store) CreateGroup(ctx context.Context, group string, from From) error {
	tag, err := s.db.Exec(ctx, s.sql.createGroup, group, from == Latest)
	if err != nil {
		return errtext.Wrap(err, "create consumer group")
	}
	if tag.RowsAffected() == 0 {
		return ErrGroupExists
	}
	return nil
}

// DropGroup deletes a consumer group with its parked keys and events, in
// one transaction: the cursor row first, so that the parked rows of a
// cursor move committing meanwhile are deleted too. ErrNoGroup when it
// does not exist.
func (s *Store) DropGroup(ctx context.Context, group string) error {
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, s.sql.dropGroup, group)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNoGroup
		}
		_, err = tx.Exec(ctx, s.sql.dropParked, group)
		return err
	})
	if errors.Is(err, ErrNoGroup) {
		return ErrNoGroup
	}
	return errtext.Wrap(err, "drop consumer group")
}

// TakeGroup takes the group's lease for token when it is free or expired
// (or renews token's own) and returns the group's cursor, after checking
// that its ticks did not go backwards. ErrGroupBusy when another token
// holds an unexpired lease, ErrNoGroup, ErrGroupStopped; and
// ErrSnapshotBackwards (also when the cluster's transaction ids are
// behind the newest tick), with the lease held, for the caller to stop
// the group.
func (s *Store) TakeGroup(ctx context.Context, group, owner string, token uuid.UUID, lease time.Duration) (batch.Cursor, error) {
	cur := batch.Cursor{Group: group}
	err := s.db.QueryRow(ctx, s.sql.takeGroup, group, owner, token.String(), micros(lease)).
		Scan(&cur.LastTick, &cur.BatchTick, &cur.BatchSeq)
	if errors.Is(err, pgx.ErrNoRows) {
		return batch.Cursor{}, s.whyNotTaken(ctx, group)
	}
	if err != nil {
		return batch.Cursor{}, errtext.Wrap(err, "take consumer group %q", group)
	}
	target := cur.BatchTick
	if _, _, err := s.checkedTicks(ctx, cur.LastTick, target, 1); err != nil {
		return cur, err
	}
	return cur, s.checkCluster(ctx)
}

// checkCluster returns ErrSnapshotBackwards when the cluster's
// transaction ids are behind the newest tick's snapshot: a logical dump
// restored into a cluster whose ids are lower. There the ticker refuses to
// tick (PGR02) and the stored ticks agree with each other, so only this
// comparison sees it; new transactions would take ids that the ticks
// already count as finished, and their events would be skipped.
func (s *Store) checkCluster(ctx context.Context) error {
	var now, newest string
	if err := s.db.QueryRow(ctx, s.sql.clusterXmax).Scan(&now, &newest); err != nil {
		return errtext.Wrap(err, "read the current transaction id")
	}
	n, err := strconv.ParseUint(now, 10, 64)
	if err != nil {
		return errtext.Wrap(err, "parse xmax %q", now)
	}
	t, err := strconv.ParseUint(newest, 10, 64)
	if err != nil {
		return errtext.Wrap(err, "parse xmax %q", newest)
	}
	if n < t {
		return backwards("the cluster's next transaction id %d is below the newest tick's xmax %d", n, t)
	}
	return nil
}

// whyNotTaken tells ErrNoGroup, ErrGroupStopped and ErrGroupBusy apart.
func (s *Store) whyNotTaken(ctx context.Context, group string) error {
	var reason *string
	err := s.db.QueryRow(ctx, s.sql.groupState, group).Scan(&reason)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ErrNoGroup
	case err != nil:
		return errtext.Wrap(err, "take consumer group %q", group)
	case reason != nil:
		return errtext.WrapAs(ErrGroupStopped, errors.New(*reason), "group %q", group)
	}
	return ErrGroupBusy
}

// RenewGroup extends token's lease of the group by lease from now on the
// database clock. ErrLeaseLost when token does not hold an unexpired
// lease.
func (s *Store) RenewGroup(ctx context.Context, group string, token uuid.UUID, lease time.Duration) error {
	tag, err := s.db.Exec(ctx, s.sql.renewGroup, group, token.String(), micros(lease))
	if err != nil {
		return errtext.Wrap(err, "renew consumer group %q", group)
	}
	if tag.RowsAffected() == 0 {
		return ErrLeaseLost
	}
	return nil
}

// ReleaseGroup gives up token's lease of the group (nothing when token
// does not hold it).
func (s *Store) ReleaseGroup(ctx context.Context, group string, token uuid.UUID) error {
	_, err := s.db.Exec(ctx, s.sql.releaseGroup, group, token.String())
	return errtext.Wrap(err, "release consumer group %q", group)
}

// StopGroup records reason as the group's stopped_reason and releases
// token's lease: the group is read no more until an operator clears it.
// ErrLeaseLost when token does not hold the group.
func (s *Store) StopGroup(ctx context.Context, group string, token uuid.UUID, reason string) error {
	tag, err := s.db.Exec(ctx, s.sql.stopGroup, group, token.String(), reason)
	if err != nil {
		return errtext.Wrap(err, "stop consumer group %q", group)
	}
	if tag.RowsAffected() == 0 {
		return ErrLeaseLost
	}
	return nil
}

// ParkedKeys returns the keys the group parked.
func (s *Store) ParkedKeys(ctx context.Context, group string) (map[string]bool, error) {
	rows, err := s.db.Query(ctx, s.sql.parkedKeys, group)
	if err != nil {
		return nil, errtext.Wrap(err, "read parked keys")
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, errtext.Wrap(err, "read parked keys")
	}
	out := make(map[string]bool, len(keys))
	for _, k := range keys {
		out[k] = true
	}
	return out, nil
}

// Lag reads how far the group is behind the newest tick. ErrNoGroup
// when it does not exist (or its cursor tick is gone).
func (s *Store) Lag(ctx context.Context, group string) (Lag, error) {
	gs, err := s.Groups(ctx, group)
	if err != nil {
		return Lag{}, err
	}
	if len(gs) == 0 || !gs[0].TickKept {
		return Lag{}, ErrNoGroup
	}
	return gs[0].Lag, nil
}

// GroupState is a consumer group's row and lag, as operators see it.
type GroupState struct {
	Name string
	// Cursor is the group's position.
	Cursor batch.Cursor
	// Owner took the lease last; Leased says it has not expired
	// (LeaseUntil, database clock).
	Owner      string
	Leased     bool
	LeaseUntil *time.Time
	// StoppedReason is why the group stopped; "" while it runs.
	StoppedReason      string
	CreatedAt, MovedAt time.Time
	// TickKept says the cursor tick is still recorded; Lag is zero
	// when it is not.
	TickKept bool
	Lag      Lag
	// ParkedKeys counts the group's parked keys.
	ParkedKeys int64
}

// Groups returns every consumer group (group "") or the one named, by
// name, in one statement.
func (s *Store) Groups(ctx context.Context, group string) ([]GroupState, error) {
	rows, err := s.db.Query(ctx, s.sql.groups, group)
	if err != nil {
		return nil, errtext.Wrap(err, "read consumer groups")
	}
	var g GroupState
	var age float64
	out, err := pgx.AppendRows([]GroupState(nil), rows, func(row pgx.CollectableRow) (GroupState, error) {
		err := row.Scan(&g.Name, &g.Cursor.LastTick, &g.Cursor.BatchTick, &g.Cursor.BatchSeq, &g.Owner, &g.Leased, &g.LeaseUntil,
			&g.StoppedReason, &g.CreatedAt, &g.MovedAt, &g.TickKept, &g.Lag.Events, &g.Lag.Seconds, &age, &g.ParkedKeys)
		g.Cursor.Group = g.Name
		g.Lag.TickAge = time.Duration(age * float64(time.Second))
		return g, err
	})
	return out, errtext.Wrap(err, "read consumer groups")
}
