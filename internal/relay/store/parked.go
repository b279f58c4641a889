package store

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/relay/batch"
)

// MaxRequests bounds the requests Requests returns at once; the others
// wait for the next call.
const MaxRequests = 100

// Request is an operator's pending request on a parked key
// (admin.RequestReplay, admin.RequestSkip): publish its parked events
// again, or (Skip) drop them; either way the key is unparked.
type Request struct {
	Key  string
	Skip bool
}

// Requests returns the group's pending replay and skip requests, the
// oldest first, at most MaxRequests. One statement on the parked keys'
// primary key.
func (s *Store) Requests(ctx context.Context, group string) ([]Request, error) {
	rows, err := s.db.Query(ctx, s.sql.requests, group, MaxRequests)
	if err != nil {
		return nil, errtext.Wrap(err, "read parked key requests of %q", group)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Request, error) {
		var r Request
		err := row.Scan(&r.Key, &r.Skip)
		return r, err
	})
	return out, errtext.Wrap(err, "read parked key requests of %q", group)
}

// ParkedEvents returns the parked events of the group's keys, in seq
// order (one statement, whatever the number of keys).
func (s *Store) ParkedEvents(ctx context.Context, group string, keys []string) ([]batch.Event, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	rows, err := s.db.Query(ctx, s.sql.parkedEvents, group, keys)
	if err != nil {
		return nil, errtext.Wrap(err, "read parked events of %q", group)
	}
	out, err := pgx.CollectRows(rows, scanEvent)
	return out, errtext.Wrap(err, "read parked events of %q", group)
}

// Settle writes o (its Ahead aside) without moving the cursor, in a
// transaction fenced as a move is: token must hold an unexpired lease of
// the group and the cursor be at cur (ErrLeaseLost and nothing written
// otherwise). A reader with no batch to move carries out requests with
// it.
func (s *Store) Settle(ctx context.Context, token uuid.UUID, cur batch.Cursor, o Outcome) error {
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, s.sql.fence, cur.Group, token.String(), cur.LastTick, cur.BatchTick, cur.BatchSeq)
		if err != nil {
			return err
		}
		n, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return err
		}
		if len(n) == 0 {
			return ErrLeaseLost
		}
		return s.writeOutcome(ctx, tx, cur.Group, o)
	})
	if errors.Is(err, ErrLeaseLost) {
		return ErrLeaseLost
	}
	return errtext.Wrap(err, "settle parked keys of %q", cur.Group)
}

// unpark deletes the parked events and key rows of the keys in unpark
// and clears the requests of those in cleared, in one statement.
func (s *Store) unpark(ctx context.Context, tx pgx.Tx, group string, unpark, cleared []string) error {
	if len(unpark) == 0 && len(cleared) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, s.sql.unpark, group, nonNil(unpark), nonNil(cleared))
	return err
}

// nonNil is ss, or an empty slice for nil (a NULL array matches
// nothing with = ANY, but is clearer as '{}').
func nonNil(ss []string) []string {
	if ss == nil {
		return []string{}
	}
	return ss
}
