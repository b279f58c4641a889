package store

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// snapshot is a parsed pg_snapshot: every xid below xmin had finished,
// none at or above xmax had started, and xip lists those in between that
// were running (sorted, top-level ids only).
type snapshot struct {
	xmin, xmax uint64
	xip        []uint64
}

// parseSnapshot reads pg_snapshot's text form "xmin:xmax:xip,xip,...".
func parseSnapshot(text string) (snapshot, error) {
	parts := strings.Split(text, ":")
	if len(parts) != 3 {
		return snapshot{}, fmt.Errorf("pgoutbox: snapshot %q: want xmin:xmax:xip", text)
	}
	var s snapshot
	var err error
	if s.xmin, err = strconv.ParseUint(parts[0], 10, 64); err != nil {
		return snapshot{}, fmt.Errorf("pgoutbox: snapshot %q: xmin: %w", text, err)
	}
	if s.xmax, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
		return snapshot{}, fmt.Errorf("pgoutbox: snapshot %q: xmax: %w", text, err)
	}
	if parts[2] != "" {
		for _, f := range strings.Split(parts[2], ",") {
			x, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				return snapshot{}, fmt.Errorf("pgoutbox: snapshot %q: xip: %w", text, err)
			}
			s.xip = append(s.xip, x)
		}
	}
	slices.Sort(s.xip)
	if s.xmin > s.xmax || (len(s.xip) > 0 && (s.xip[0] < s.xmin || s.xip[len(s.xip)-1] >= s.xmax)) {
		return snapshot{}, fmt.Errorf("pgoutbox: snapshot %q: xip outside [xmin, xmax)", text)
	}
	return s, nil
}

// visible reports whether a transaction x that committed is visible in
// s, as pg_visible_in_snapshot says.
func (s snapshot) visible(x uint64) bool {
	if x < s.xmin {
		return true
	}
	if x >= s.xmax {
		return false
	}
	_, running := slices.BinarySearch(s.xip, x)
	return !running
}

// done returns the xids running in c (its xip) and not in t: the
// transactions that finished between the two snapshots although they
// began before c's xmax. With [xmax_c, xmax_t) they are every xid whose
// rows may be visible in t and not in c.
func done(c, t snapshot) []uint64 {
	var out []uint64
	for _, x := range c.xip {
		if _, running := slices.BinarySearch(t.xip, x); !running {
			out = append(out, x)
		}
	}
	return out
}

// xidTexts returns xs as decimal text, the xid8 array parameter of the
// batch statement.
func xidTexts(xs []uint64) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = strconv.FormatUint(x, 10)
	}
	return out
}
