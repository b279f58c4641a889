package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
)

// Parts kept ahead: AddParts keeps MinParts; the ticker keeps
// PartsFor(its observed xid rate), at least MinParts and at most
// MaxParts (a part holds sqlname.LogPartXids transaction ids).
const (
	MinParts = 16
	MaxParts = 256
	// HeadroomTime is the time the ticker's parts should last at the
	// observed xid rate.
	HeadroomTime = 48 * time.Hour
)

// PartsFor returns how many parts to keep attached from the current
// transaction id's on for xidsPerSecond: enough for HeadroomTime, within
// [MinParts, MaxParts].
func PartsFor(xidsPerSecond float64) int {
	need := xidsPerSecond * HeadroomTime.Seconds() / sqlname.LogPartXids
	if !(need > MinParts) { // NaN too
		return MinParts
	}
	if need >= MaxParts {
		return MaxParts
	}
	return int(math.Ceil(need))
}

// ErrNoHeadroom is matched by a *PartsError: the log's parts hold less
// than one part's transaction ids above the current one.
var ErrNoHeadroom = errors.New("pgoutbox: the log has less than one part left above the current transaction id")

// PartsError is CheckParts' error: inserts into the log fail once the
// transaction ids pass the last part's upper bound.
type PartsError struct {
	// Log is the log table; PartAdd its <log>_part_add function.
	Log, PartAdd string
	// HeadroomXids is the transaction ids left above the current one.
	HeadroomXids uint64
}

func (e *PartsError) Error() string {
	return fmt.Sprintf("pgoutbox: log %s has %d transaction ids of parts left above the current one, less than a part (%d): "+
		"add parts (the relay's ticker keeps them ahead; by hand: SELECT %s(lo) for each missing part's lower bound lo, "+
		"or outboxctl relay maintain)", e.Log, e.HeadroomXids, sqlname.LogPartXids, e.PartAdd)
}

// Unwrap returns ErrNoHeadroom.
func (e *PartsError) Unwrap() error { return ErrNoHeadroom }

// Parts is what KeepParts did and saw.
type Parts struct {
	// Added is how many parts were added.
	Added int
	// HeadroomXids is how many transaction ids the attached parts hold
	// above the current one (xmax).
	HeadroomXids uint64
	// Xmax is the current snapshot's xmax: the next transaction id.
	Xmax uint64
}

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
// lease; ErrSnapshotBackwards when the current snapshot is behind the
// last tick's.
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
	p, err := s.KeepParts(ctx, MinParts)
	return p.Added, p.HeadroomXids, err
}

// KeepParts keeps ahead parts (at least 1, at most MaxParts) attached
// from the part of the current transaction id on, creating the missing
// ones (through <log>_part_add), and returns what it did and saw.
func (s *Store) KeepParts(ctx context.Context, ahead int) (Parts, error) {
	ahead = min(max(ahead, 1), MaxParts)
	var p Parts
	var xmaxText string
	err := s.db.QueryRow(ctx, s.sql.addParts, ahead, sqlname.LogPartXids).Scan(&p.Added, &xmaxText)
	if err != nil {
		return Parts{}, errtext.Wrap(err, "add log parts")
	}
	if p.Xmax, err = strconv.ParseUint(xmaxText, 10, 64); err != nil {
		return p, errtext.Wrap(err, "add log parts: xmax")
	}
	p.HeadroomXids, err = s.headroomAbove(ctx, p.Xmax)
	return p, err
}

// CheckParts reads the log's head-room (nothing is written) and returns
// a *PartsError (ErrNoHeadroom) when it is less than one part: a start
// check, since the log refuses inserts past its last part.
func (s *Store) CheckParts(ctx context.Context) (headroomXids uint64, err error) {
	_, headroom, err := s.PartsState(ctx)
	if err != nil {
		return 0, err
	}
	if headroom < sqlname.LogPartXids {
		return headroom, &PartsError{Log: s.names.Table.String(), PartAdd: s.names.Function(sqlname.SuffixPartAdd), HeadroomXids: headroom}
	}
	return headroom, nil
}

// headroomAbove is how many xids the attached parts hold above xmax.
func (s *Store) headroomAbove(ctx context.Context, xmax uint64) (uint64, error) {
	_, top, err := s.partsTop(ctx)
	if err != nil || top <= xmax {
		return 0, err
	}
	return top - xmax, nil
}

// PartsState returns how many parts the log has attached and how many
// xids they hold above the current one (nothing is written).
func (s *Store) PartsState(ctx context.Context) (parts int, headroomXids uint64, err error) {
	var xmaxText string
	if err := s.db.QueryRow(ctx, s.sql.xmax).Scan(&xmaxText); err != nil {
		return 0, 0, errtext.Wrap(err, "read log parts")
	}
	xmax, err := strconv.ParseUint(xmaxText, 10, 64)
	if err != nil {
		return 0, 0, errtext.Wrap(err, "read log parts: xmax")
	}
	parts, top, err := s.partsTop(ctx)
	if err != nil || top <= xmax {
		return parts, 0, err
	}
	return parts, top - xmax, nil
}

// partsTop returns how many parts of ours are attached and the upper
// bound of the highest, read from the parts' names (Names.LogPart).
func (s *Store) partsTop(ctx context.Context) (parts int, top uint64, err error) {
	rows, err := s.db.Query(ctx, s.sql.parts, s.names.Qualified)
	if err != nil {
		return 0, 0, errtext.Wrap(err, "list log parts")
	}
	defer rows.Close()
	prefix := s.names.Table.Name + sqlname.SuffixLogPart
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return 0, 0, errtext.Wrap(err, "list log parts")
		}
		n, err := strconv.ParseUint(strings.TrimPrefix(name, prefix), 16, 64)
		if err != nil || !strings.HasPrefix(name, prefix) {
			continue // not a part of ours
		}
		parts++
		top = max(top, (n+1)*sqlname.LogPartXids)
	}
	return parts, top, errtext.Wrap(rows.Err(), "list log parts")
}
