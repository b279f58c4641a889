package store

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// randomPair returns a snapshot c and a later one t, as a server could
// take them: a transaction running at t below c's xmax was running at c.
func randomPair(rng *rand.Rand) (c, t snapshot) {
	base := uint64(rng.IntN(1 << 20))
	c.xmin = base + uint64(rng.IntN(5))
	c.xmax = c.xmin + uint64(rng.IntN(40))
	for x := c.xmin; x < c.xmax; x++ {
		if x == c.xmin || rng.IntN(3) == 0 {
			if x < c.xmax {
				c.xip = append(c.xip, x)
			}
		}
	}
	t.xmax = c.xmax + uint64(rng.IntN(40))
	for _, x := range c.xip {
		if rng.IntN(2) == 0 {
			t.xip = append(t.xip, x)
		}
	}
	for x := c.xmax; x < t.xmax; x++ {
		if rng.IntN(3) == 0 {
			t.xip = append(t.xip, x)
		}
	}
	t.xmin = t.xmax
	if len(t.xip) > 0 {
		t.xmin = t.xip[0]
	}
	return c, t
}

func (s snapshot) String() string {
	xs := make([]string, len(s.xip))
	for i, x := range s.xip {
		xs[i] = strconv.FormatUint(x, 10)
	}
	return fmt.Sprintf("%d:%d:%s", s.xmin, s.xmax, strings.Join(xs, ","))
}

// TestSnapshotDoneAgainstServer checks parseSnapshot, visible and the
// batch's candidates (done plus [xmax_c, xmax_t)) against
// pg_visible_in_snapshot for random snapshot pairs: every xid visible in t
// and not in c is a candidate, and visible agrees with the server.
func TestSnapshotDoneAgainstServer(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	rng := rand.New(rand.NewPCG(27, 1))
	for range 200 {
		c, tt := randomPair(rng)
		pc, err := parseSnapshot(c.String())
		require.NoError(t, err)
		pt, err := parseSnapshot(tt.String())
		require.NoError(t, err)
		var xs []string
		for x := c.xmin - min(c.xmin, 3); x < tt.xmax+3; x++ {
			xs = append(xs, strconv.FormatUint(x, 10))
		}
		rows, err := db.Pool.Query(t.Context(), `SELECT x::text::bigint, pg_visible_in_snapshot(x::xid8, $2::text::pg_snapshot),
			pg_visible_in_snapshot(x::xid8, $3::text::pg_snapshot) FROM unnest($1::text[]) AS x`, xs, c.String(), tt.String())
		require.NoError(t, err)
		cand := done(pc, pt)
		var x int64
		var inC, inT bool
		_, err = pgx.ForEachRow(rows, []any{&x, &inC, &inT}, func() error {
			u := uint64(x)
			require.Equal(t, inC, pc.visible(u), "visible(%d, %s)", u, c)
			require.Equal(t, inT, pt.visible(u), "visible(%d, %s)", u, tt)
			isCand := (u >= pc.xmax && u < pt.xmax) || slices.Contains(cand, u)
			if inT && !inC {
				require.True(t, isCand, "%d is in the batch %s -> %s but not a candidate", u, c, tt)
			}
			return nil
		})
		require.NoError(t, err)
	}
}

func TestParseSnapshotRefuses(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "1:2", "a:2:", "1:b:", "1:5:x", "5:1:", "1:5:7", "3:5:1"} {
		_, err := parseSnapshot(s)
		require.Error(t, err, s)
	}
	s, err := parseSnapshot("10:20:15,11")
	require.NoError(t, err)
	require.Equal(t, []uint64{11, 15}, s.xip)
}

// FuzzParseSnapshot checks that parsing never panics and that what it
// accepts formats back to an equal snapshot.
func FuzzParseSnapshot(f *testing.F) {
	f.Add("10:20:15,11")
	f.Add("1:1:")
	f.Fuzz(func(t *testing.T, text string) {
		s, err := parseSnapshot(text)
		if err != nil {
			return
		}
		again, err := parseSnapshot(s.String())
		require.NoError(t, err)
		require.Equal(t, s, again)
	})
}
