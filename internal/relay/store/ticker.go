package store

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
)

// MinParts is how many parts AddParts keeps attached from the part of
// the current transaction id on.
const MinParts = 16

// TakeTicker takes the ticker's lease for token when it is free or
// expired, or renews it when token holds it; held says whether token
// holds it now, until lease from the database's clock.
func (s *Store) TakeTicker(ctx context.Context, owner string, token uuid.UUID, lease time.Duration) (held bool, err error) {
	tag, err := s.db.Exec(ctx, s.sql.takeTicker, owner, token.String(), micros(lease))
	if err != nil {
		return false, errtext.Wrap(err, "take the ticker lease")
	}
	return tag.RowsAffected() == 1, nil
}

// ReleaseTicker gives up token's ticker lease (nothing when token does
// not hold it).
func (s *Store) ReleaseTicker(ctx context.Context, token uuid.UUID) error {
	_, err := s.db.Exec(ctx, s.sql.releaseTicker, token.String())
	return errtext.Wrap(err, "release the ticker lease")
}

// Tick records a tick when one is needed: events were inserted since the
// last tick, a transaction of the last tick's xip that has events
// finished, or idle passed since the last tick. id is the new tick's (made)
// or the last one's. ErrLeaseLost when token does not hold the ticker's
// lease; ErrSnapshotBackwards or ErrDatabaseChanged when the current
// snapshot is behind the last tick's or the cluster changed.
func (s *Store) Tick(ctx context.Context, token uuid.UUID, idle time.Duration) (id int64, made bool, err error) {
	err = s.db.QueryRow(ctx, s.sql.tick, token.String(), micros(idle)).Scan(&id, &made)
	if err != nil {
		return 0, false, errtext.Wrap(mapTickError(err), "tick")
	}
	return id, made, nil
}

// AddParts keeps MinParts parts attached from the part of the current
// transaction id on, creating the missing ones (through <log>_part_add).
// It returns how many it added and the head-room: how many xids the
// attached parts hold above the current one.
func (s *Store) AddParts(ctx context.Context) (added int, headroomXids uint64, err error) {
	var xmaxText string
	err = s.db.QueryRow(ctx, s.sql.addParts, MinParts, sqlname.LogPartXids).Scan(&added, &xmaxText)
	if err != nil {
		return 0, 0, errtext.Wrap(err, "add log parts")
	}
	xmax, err := strconv.ParseUint(xmaxText, 10, 64)
	if err != nil {
		return added, 0, errtext.Wrap(err, "add log parts: xmax")
	}
	top, err := s.topPart(ctx)
	if err != nil {
		return added, 0, err
	}
	if top <= xmax {
		return added, 0, nil
	}
	return added, top - xmax, nil
}

// topPart returns the upper bound of the highest attached part, read
// from the parts' names (Names.LogPart).
func (s *Store) topPart(ctx context.Context) (uint64, error) {
	rows, err := s.db.Query(ctx, s.sql.parts, s.names.Qualified)
	if err != nil {
		return 0, errtext.Wrap(err, "list log parts")
	}
	defer rows.Close()
	prefix := s.names.Table.Name + sqlname.SuffixLogPart
	var top uint64
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return 0, errtext.Wrap(err, "list log parts")
		}
		n, err := strconv.ParseUint(strings.TrimPrefix(name, prefix), 16, 64)
		if err != nil || !strings.HasPrefix(name, prefix) {
			continue // not a part of ours
		}
		top = max(top, (n+1)*sqlname.LogPartXids)
	}
	return top, errtext.Wrap(rows.Err(), "list log parts")
}
