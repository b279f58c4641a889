package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// snapshot is a parsed pg_snapshot. It, parseSnapshot and visible copy
// internal/relay/store's snap.go on purpose: the checker must not share
// code with what it checks, so that a mistake there fails the check
// instead of being repeated by it.
type snapshot struct {
	xmin, xmax uint64
	xip        []uint64 // sorted
}

// parseSnapshot parses pg_snapshot's text form "xmin:xmax:xip,xip,...".
func parseSnapshot(s string) (snapshot, error) {
	f := strings.Split(s, ":")
	if len(f) != 3 {
		return snapshot{}, fmt.Errorf("snapshot %q: want xmin:xmax:xip", s)
	}
	var sn snapshot
	var err error
	if sn.xmin, err = strconv.ParseUint(f[0], 10, 64); err != nil {
		return snapshot{}, fmt.Errorf("snapshot %q: %w", s, err)
	}
	if sn.xmax, err = strconv.ParseUint(f[1], 10, 64); err != nil {
		return snapshot{}, fmt.Errorf("snapshot %q: %w", s, err)
	}
	if f[2] != "" {
		for _, x := range strings.Split(f[2], ",") {
			v, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				return snapshot{}, fmt.Errorf("snapshot %q: %w", s, err)
			}
			sn.xip = append(sn.xip, v)
		}
	}
	slices.Sort(sn.xip)
	return sn, nil
}

// visible reports whether the transaction xid had committed (or
// aborted) in s, as pg_visible_in_snapshot does: below xmin, or below
// xmax and not in progress.
func (s snapshot) visible(xid uint64) bool {
	if xid < s.xmin {
		return true
	}
	if xid >= s.xmax {
		return false
	}
	_, running := slices.BinarySearch(s.xip, xid)
	return !running
}

// tickIndex answers "in which tick did a transaction become visible".
type tickIndex struct {
	ids   []int64
	snaps []snapshot
}

// newTickIndex parses ticks (sorted by id here) and lists, as problems,
// unparsable snapshots and ticks whose xmin or xmax went backwards (the
// relay must never record one: docs/relay-design.md 3.4).
func newTickIndex(ticks []TickRecord) (tickIndex, []string) {
	ts := slices.Clone(ticks)
	slices.SortFunc(ts, func(a, b TickRecord) int { return cmp.Compare(a.ID, b.ID) })
	var ix tickIndex
	var problems []string
	for _, t := range ts {
		sn, err := parseSnapshot(t.Snapshot)
		if err != nil {
			problems = append(problems, fmt.Sprintf("tick %d: %v", t.ID, err))
			continue
		}
		if n := len(ix.snaps); n > 0 && (sn.xmax < ix.snaps[n-1].xmax || sn.xmin < ix.snaps[n-1].xmin) {
			problems = append(problems, fmt.Sprintf("tick %d's snapshot %s went backwards from tick %d's",
				t.ID, t.Snapshot, ix.ids[n-1]))
		}
		ix.ids, ix.snaps = append(ix.ids, t.ID), append(ix.snaps, sn)
	}
	return ix, problems
}

// first returns the first tick whose snapshot shows xid finished; 0 when
// none does. (Visibility only grows from tick to tick, so the search
// starts at the first tick whose xmax is above xid.)
func (ix tickIndex) first(xid uint64) int64 {
	i, _ := slices.BinarySearchFunc(ix.snaps, xid, func(s snapshot, x uint64) int {
		if s.xmax <= x {
			return -1
		}
		return 1
	})
	for ; i < len(ix.snaps); i++ {
		if ix.snaps[i].visible(xid) {
			return ix.ids[i]
		}
	}
	return 0
}
