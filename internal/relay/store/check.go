package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/relay/batch"
)

// checkedTicks reads the cursor tick c, the target tick (target when not
// 0, else the newest within span events of c, or the next) and the
// newest tick, and checks that none went backwards: the target after c
// with an xmax and an xmin not below c's and the same system identifier,
// and the newest tick not behind the newest this Store saw before. t is
// zero when there is no target.
func (s *Store) checkedTicks(ctx context.Context, cursor, target int64, span int) (c, t batch.Tick, err error) {
	rows, err := s.db.Query(ctx, s.sql.ticks, cursor, target, span)
	if err != nil {
		return c, t, errtext.Wrap(err, "read ticks")
	}
	var newest batch.Tick
	var tk batch.Tick
	var isCursor, isTarget, isNewest bool
	_, err = pgx.ForEachRow(rows, []any{&tk.ID, &tk.Snapshot, &tk.Time, &tk.LastSeq, &tk.Sysid, &isCursor, &isTarget, &isNewest},
		func() error {
			if isCursor {
				c = tk
			}
			if isTarget {
				t = tk
			}
			if isNewest {
				newest = tk
			}
			return nil
		})
	if err != nil {
		return c, t, errtext.Wrap(err, "read ticks")
	}
	if c.ID == 0 {
		return c, t, fmt.Errorf("pgoutbox: the cursor tick %d is missing", cursor)
	}
	if target != 0 && t.ID == 0 {
		return c, t, backwards("the open batch's tick %d is missing", target)
	}
	return c, t, s.checkTicks(c, t, newest)
}

// checkTicks is the backwards check of checkedTicks.
func (s *Store) checkTicks(c, t, newest batch.Tick) error {
	sc, err := parseSnapshot(c.Snapshot)
	if err != nil {
		return err
	}
	sn, err := parseSnapshot(newest.Snapshot)
	if err != nil {
		return err
	}
	if err := s.checkSeen(newest.ID, sn.xmax); err != nil {
		return err
	}
	if newest.ID < c.ID || sn.xmax < sc.xmax {
		return backwards("the newest tick %d (xmax %d) is behind the cursor tick %d (xmax %d)", newest.ID, sn.xmax, c.ID, sc.xmax)
	}
	if t.ID == 0 {
		return nil
	}
	st, err := parseSnapshot(t.Snapshot)
	if err != nil {
		return err
	}
	switch {
	case t.ID <= c.ID:
		return backwards("target tick %d is not after the cursor tick %d", t.ID, c.ID)
	case st.xmax < sc.xmax || st.xmin < sc.xmin:
		return backwards("tick %d (%s) is older than the cursor tick %d (%s)", t.ID, t.Snapshot, c.ID, c.Snapshot)
	}
	return nil
}

// checkSeen checks the newest tick (id, xmax) against the newest this
// Store saw, and remembers it.
func (s *Store) checkSeen(id int64, xmax uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id < s.seen.id || xmax < s.seen.xmax {
		return backwards("the newest tick is %d (xmax %d), but tick %d (xmax %d) was seen before", id, xmax, s.seen.id, s.seen.xmax)
	}
	s.seen = tickMark{id: id, xmax: xmax}
	return nil
}

// backwards is an error wrapping ErrSnapshotBackwards with its detail.
func backwards(format string, args ...any) error {
	return errtext.WrapAs(ErrSnapshotBackwards, fmt.Errorf(format, args...), "")
}
