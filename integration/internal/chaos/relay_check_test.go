package chaos_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/integration/internal/chaos"
)

// relayRun is a hand-made relay scenario: three events in three ticks,
// a, b of key k1 (v1, v2) and c of k2 (v1, a long transaction that began
// first), read by r1 in two batches: 1 → 2 (a), 2 → 3 (b, c).
type relayRun struct {
	in      chaos.RelayInput
	a, b, c uuid.UUID
	t1      uuid.UUID // r1's token
}

func newRelayRun() *relayRun {
	r := &relayRun{a: uuid.New(), b: uuid.New(), c: uuid.New(), t1: uuid.New()}
	r.in = chaos.RelayInput{
		Group: "g",
		Ledger: []chaos.LedgerEntry{
			{ID: r.a, Key: "k1", V: 1, Xid: 102, Seq: 2},
			{ID: r.b, Key: "k1", V: 2, Xid: 103, Seq: 3},
			{ID: r.c, Key: "k2", V: 1, Xid: 101, Seq: 1},
		},
		Ticks: []chaos.TickRecord{{ID: 3, Snapshot: "104:104:"}, {ID: 1, Snapshot: "100:100:"}, {ID: 2, Snapshot: "101:103:101"}},
		Cursor: []chaos.CursorEntry{
			{Op: "INSERT", Group: "g", NewLastTick: 1, At: at(-10)},
			take("r1", uuid.Nil, r.t1, 1, 0),
			move("r1", r.t1, 1, 2, 20),
			move("r1", r.t1, 2, 3, 40),
		},
		Deliveries: []chaos.Delivery{
			{ID: r.a, Key: "k1", V: 1, Replica: "r1", Call: 1, At: at(10)},
			{ID: r.c, Key: "k2", V: 1, Replica: "r1", Call: 2, At: at(30)},
			{ID: r.b, Key: "k1", V: 2, Replica: "r1", Call: 2, At: at(31)},
		},
		FaultsEnded: at(0), Drained: at(50),
	}
	return r
}

// take is the cursor entry of owner taking group g with token tok (from
// prev) at ms, the cursor at tick last, for a lease of 10 s.
func take(owner string, prev, tok uuid.UUID, last int64, ms int) chaos.CursorEntry {
	return chaos.CursorEntry{Op: "UPDATE", Group: "g", OldLastTick: last, NewLastTick: last, OldToken: prev, NewToken: tok,
		NewOwner: owner, OldLeaseUntil: at(ms - 1), StatementAt: at(ms), At: at(ms), Writer: owner}
}

// move is the cursor entry of owner moving group g from tick c to t with
// token tok at ms, within its lease.
func move(owner string, tok uuid.UUID, c, t int64, ms int) chaos.CursorEntry {
	return chaos.CursorEntry{Op: "UPDATE", Group: "g", OldLastTick: c, NewLastTick: t, OldToken: tok, NewToken: tok,
		OldOwner: owner, NewOwner: owner, OldLeaseUntil: at(ms + 10000), StatementAt: at(ms), XactAt: at(ms), At: at(ms), Writer: owner}
}

// violations checks in and returns the report and its violations as one
// text.
func violations(t *testing.T, in chaos.RelayInput) (chaos.RelayReport, string) {
	t.Helper()
	rep := chaos.CheckRelay(in)
	return rep, strings.Join(rep.Violations(), "\n")
}

func TestCheckRelayCleanRunHasNoViolation(t *testing.T) {
	t.Parallel()
	r := newRelayRun()
	rep, v := violations(t, r.in)
	require.Empty(t, v, rep.String())
	require.Equal(t, 3, rep.Events)
	require.Equal(t, 2, rep.Moves)
	require.Equal(t, 1, rep.Takes)
	require.Equal(t, int64(50), rep.DrainTime.Milliseconds())
}

func TestCheckRelayLost(t *testing.T) {
	t.Parallel()
	r := newRelayRun()
	r.in.Deliveries = r.in.Deliveries[:2] // b never acked, yet the cursor moved 2 → 3
	r.in.Parked = []uuid.UUID{r.b}
	rep, v := violations(t, r.in)
	require.Len(t, rep.Lost, 1)
	require.Equal(t, r.b, rep.Lost[0].ID)
	require.Contains(t, rep.Lost[0].Reason, "parked; in tick 3; the cursor moved past it (2 → 3 by r1")
	require.Contains(t, v, "lost "+r.b.String())
}

func TestCheckRelayLostNeverPassed(t *testing.T) {
	t.Parallel()
	r := newRelayRun()
	r.in.Deliveries = r.in.Deliveries[:2]
	r.in.Cursor = r.in.Cursor[:3] // no move 2 → 3
	r.in.Ledger = append(r.in.Ledger, chaos.LedgerEntry{ID: uuid.New(), Key: "k3", V: 1, Xid: 200, Seq: 9})
	rep, _ := violations(t, r.in)
	require.Len(t, rep.Lost, 2)
	reasons := rep.Lost[0].Reason + "|" + rep.Lost[1].Reason
	require.Contains(t, reasons, "in tick 3; the cursor never moved past it")
	require.Contains(t, reasons, "no tick shows it committed")
}

func TestCheckRelayUnexpected(t *testing.T) {
	t.Parallel()
	r := newRelayRun()
	rolled, stray := uuid.New(), uuid.New()
	r.in.RolledBack = []uuid.UUID{rolled}
	r.in.Deliveries = append(r.in.Deliveries,
		chaos.Delivery{ID: rolled, Key: "k3", V: 1, Replica: "r1", At: at(32)},
		chaos.Delivery{ID: stray, Key: "k4", V: 1, Replica: "r1", At: at(33)})
	rep, v := violations(t, r.in)
	require.Len(t, rep.Unexpected, 2)
	require.Contains(t, v, "unexpected "+rolled.String()+": delivered, but its transaction was rolled back on purpose")
	require.Contains(t, v, "unexpected "+stray.String()+": delivered without a committed business row")
}

func TestCheckRelayOrderViolation(t *testing.T) {
	t.Parallel()
	r := newRelayRun()
	// k1's v2 (b) acked before its v1 (a), both in one batch.
	r.in.Deliveries = []chaos.Delivery{
		{ID: r.b, Key: "k1", V: 2, Replica: "r1", At: at(10)},
		{ID: r.a, Key: "k1", V: 1, Replica: "r1", At: at(11)},
		{ID: r.c, Key: "k2", V: 1, Replica: "r1", At: at(12)},
	}
	r.in.Cursor = r.in.Cursor[:2]
	r.in.Cursor = append(r.in.Cursor, move("r1", r.t1, 1, 3, 40))
	rep, v := violations(t, r.in)
	require.Len(t, rep.Order, 1, rep.String())
	require.Contains(t, v, "order: key k1: v1 first delivered by r1")
	require.Contains(t, v, "after v2")
}

func TestCheckRelayOrderOnlyCountsFirstDeliveries(t *testing.T) {
	t.Parallel()
	r := newRelayRun()
	t2 := uuid.New()
	// r1 is killed after acking a; r2 publishes a again after b: a
	// duplicate, not an order violation.
	r.in.Cursor = []chaos.CursorEntry{r.in.Cursor[0], r.in.Cursor[1], take("r2", r.t1, t2, 1, 15), move("r2", t2, 1, 3, 40)}
	r.in.Kills = []chaos.Kill{{Replica: "r1", At: at(12)}}
	r.in.Deliveries = []chaos.Delivery{
		{ID: r.a, Key: "k1", V: 1, Replica: "r1", At: at(10)},
		{ID: r.a, Key: "k1", V: 1, Replica: "r2", At: at(20)},
		{ID: r.b, Key: "k1", V: 2, Replica: "r2", At: at(21)},
		{ID: r.c, Key: "k2", V: 1, Replica: "r2", At: at(22)},
	}
	rep, v := violations(t, r.in)
	require.Empty(t, v, rep.String())
	require.Len(t, rep.Duplicates, 1)
	require.True(t, rep.Duplicates[0].Explained)
	require.Equal(t, "kill of r1 between the ack and the cursor move", rep.Duplicates[0].Cause)
}

func TestCheckRelayDuplicateByLeaseLoss(t *testing.T) {
	t.Parallel()
	r := newRelayRun()
	t2 := uuid.New()
	// r1 (paused past its lease) acked a; r2 took the group and published
	// a again; r1's move was fenced off.
	r.in.Cursor = []chaos.CursorEntry{r.in.Cursor[0], r.in.Cursor[1], take("r2", r.t1, t2, 1, 15), move("r2", t2, 1, 3, 40)}
	r.in.Deliveries = []chaos.Delivery{
		{ID: r.a, Key: "k1", V: 1, Replica: "r1", At: at(10)},
		{ID: r.a, Key: "k1", V: 1, Replica: "r2", At: at(20)},
		{ID: r.b, Key: "k1", V: 2, Replica: "r2", At: at(21)},
		{ID: r.c, Key: "k2", V: 1, Replica: "r2", At: at(22)},
	}
	rep, v := violations(t, r.in)
	require.Empty(t, v, rep.String())
	require.Contains(t, rep.Duplicates[0].Cause, "lease of r1 lost before the cursor move (group taken by r2")
	require.Equal(t, "1 (1 lease lost)", figure(rep, "duplicated"))
}

func TestCheckRelayDuplicateByOutage(t *testing.T) {
	t.Parallel()
	r := newRelayRun()
	// The server restarted during r1's move 1 → 2, which did not commit;
	// r1 kept its lease and published a again.
	r.in.Outages = []chaos.Outage{{From: at(6), To: at(8)}}
	r.in.Deliveries = append([]chaos.Delivery{{ID: r.a, Key: "k1", V: 1, Replica: "r1", At: at(5)}}, r.in.Deliveries...)
	rep, v := violations(t, r.in)
	require.Empty(t, v, rep.String())
	require.Equal(t, "server outage between the ack and the cursor move", rep.Duplicates[0].Cause)
}

func TestCheckRelayDuplicateUnexplainedWithoutFault(t *testing.T) {
	t.Parallel()
	r := newRelayRun()
	r.in.Deliveries = append([]chaos.Delivery{{ID: r.a, Key: "k1", V: 1, Replica: "r1", At: at(5)}}, r.in.Deliveries...)
	rep, v := violations(t, r.in)
	require.Equal(t, 1, rep.Unexplained())
	require.Contains(t, v, "unexplained duplicate "+r.a.String())
	require.Contains(t, v, "no kill, lease loss or outage")
}

func TestCheckRelayDuplicateUnexplainedAfterMove(t *testing.T) {
	t.Parallel()
	r := newRelayRun()
	t2 := uuid.New()
	// r1 moved past a (1 → 2); r2 took the group after and published a
	// again: it read a batch already done. The kill does not excuse it.
	r.in.Cursor = append(r.in.Cursor[:3:3], take("r2", r.t1, t2, 2, 25), move("r2", t2, 2, 3, 40))
	r.in.Kills = []chaos.Kill{{Replica: "r1", At: at(22)}}
	r.in.Deliveries = []chaos.Delivery{
		{ID: r.a, Key: "k1", V: 1, Replica: "r1", At: at(10)},
		{ID: r.a, Key: "k1", V: 1, Replica: "r2", At: at(30)},
		{ID: r.b, Key: "k1", V: 2, Replica: "r2", At: at(31)},
		{ID: r.c, Key: "k2", V: 1, Replica: "r2", At: at(32)},
	}
	rep, v := violations(t, r.in)
	require.Equal(t, 1, rep.Unexplained(), rep.String())
	require.Contains(t, v, "r1's token moved the cursor past it (1 → 2")
}

func TestCheckRelayDuplicateAfterPartialMove(t *testing.T) {
	t.Parallel()
	r := newRelayRun()
	t2 := uuid.New()
	// One batch 1 → 3 cut at MaxBatch after seq 2: r1's partial move
	// covers c (seq 1) and a (seq 2), not b (seq 3). r1 is killed; r2
	// republishes b (explained) and a (not: its move happened).
	partial := move("r1", r.t1, 1, 1, 20)
	partial.NewBatchTick, partial.NewBatchSeq = 3, 2
	r.in.Cursor = []chaos.CursorEntry{r.in.Cursor[0], r.in.Cursor[1], partial, take("r2", r.t1, t2, 1, 30), move("r2", t2, 1, 3, 40)}
	r.in.Cursor[4].OldBatchTick, r.in.Cursor[4].OldBatchSeq = 3, 2
	r.in.Kills = []chaos.Kill{{Replica: "r1", At: at(25)}}
	r.in.Deliveries = []chaos.Delivery{
		{ID: r.c, Key: "k2", V: 1, Replica: "r1", At: at(10)},
		{ID: r.a, Key: "k1", V: 1, Replica: "r1", At: at(11)},
		{ID: r.b, Key: "k1", V: 2, Replica: "r1", At: at(21)},
		{ID: r.a, Key: "k1", V: 1, Replica: "r2", At: at(35)},
		{ID: r.b, Key: "k1", V: 2, Replica: "r2", At: at(36)},
	}
	rep, v := violations(t, r.in)
	require.Len(t, rep.Duplicates, 2, rep.String())
	require.Equal(t, 1, rep.Unexplained(), rep.String())
	require.Contains(t, v, "unexplained duplicate "+r.a.String())
	require.NotContains(t, v, "unexplained duplicate "+r.b.String())
}

func TestCheckRelayDuplicateWithoutTake(t *testing.T) {
	t.Parallel()
	r := newRelayRun()
	r.in.Deliveries = append(r.in.Deliveries, chaos.Delivery{ID: r.a, Key: "k1", V: 1, Replica: "ghost", At: at(5)})
	rep, v := violations(t, r.in)
	require.Equal(t, 1, rep.Unexplained())
	require.Contains(t, v, "ghost published it")
	require.Contains(t, v, "without having taken the group")
}

func TestCheckRelayTokenFromDelivery(t *testing.T) {
	t.Parallel()
	r := newRelayRun()
	t2 := uuid.New()
	// Both tokens belong to owner r1 (it took the group again after its
	// lease lapsed); the deliveries name their token, so the first one's
	// move is looked for under t1, not t2.
	r.in.Cursor = []chaos.CursorEntry{r.in.Cursor[0], r.in.Cursor[1], take("r1", r.t1, t2, 1, 15), move("r1", t2, 1, 3, 40)}
	r.in.Deliveries = []chaos.Delivery{
		{ID: r.a, Key: "k1", V: 1, Replica: "r1", At: at(10), Token: r.t1},
		{ID: r.a, Key: "k1", V: 1, Replica: "r1", At: at(20), Token: t2},
		{ID: r.b, Key: "k1", V: 2, Replica: "r1", At: at(21), Token: t2},
		{ID: r.c, Key: "k2", V: 1, Replica: "r1", At: at(22), Token: t2},
	}
	rep, v := violations(t, r.in)
	require.Empty(t, v, rep.String())
	require.Contains(t, rep.Duplicates[0].Cause, "lease of r1 lost")
}

func TestCheckRelayEarlyMove(t *testing.T) {
	t.Parallel()
	r := newRelayRun()
	r.in.Deliveries[0].At = at(25) // a acked after the move 1 → 2 at 20
	rep, v := violations(t, r.in)
	require.Len(t, rep.EarlyMoves, 1)
	require.Contains(t, v, "early move: "+r.a.String()+": the cursor moved past it (1 → 2 by r1")
}

func TestCheckRelayCursorFencing(t *testing.T) {
	t.Parallel()
	r := newRelayRun()
	late := move("r1", r.t1, 2, 3, 40)
	late.OldLeaseUntil = at(30)
	back := move("r1", r.t1, 3, 2, 45)
	other := move("r1", r.t1, 2, 3, 46)
	other.OldToken = uuid.New()
	stopped := move("r1", r.t1, 3, 4, 47)
	stopped.NewStopped = "snapshot went backwards"
	intruder := move("r1", r.t1, 3, 4, 48)
	intruder.Writer = "r2"
	r.in.Cursor = append(r.in.Cursor[:3:3], late, back, other, stopped, intruder)
	rep, v := violations(t, r.in)
	require.Len(t, rep.Cursor, 5, rep.String())
	require.Contains(t, v, "cursor: move 2 → 3 by r1")
	require.Contains(t, v, "its transaction began 10ms after the lease ended")
	require.Contains(t, v, "move 3 → 4 by r2 at Dec  1 12:00:00.048000: r1 held the group")
	require.Contains(t, v, "the cursor went backwards")
	require.Contains(t, v, "not under the token that held the group")
	require.Contains(t, v, "the group was stopped (snapshot went backwards)")
}

func TestCheckRelayTicksBackwards(t *testing.T) {
	t.Parallel()
	r := newRelayRun()
	r.in.Ticks = append(r.in.Ticks, chaos.TickRecord{ID: 4, Snapshot: "90:95:"}, chaos.TickRecord{ID: 5, Snapshot: "bad"})
	rep, v := violations(t, r.in)
	require.Len(t, rep.Cursor, 2)
	require.Contains(t, v, "cursor: tick 4's snapshot 90:95: went backwards from tick 3's")
	require.Contains(t, v, `cursor: tick 5: snapshot "bad"`)
}

func TestCheckRelayMismatchAndLedger(t *testing.T) {
	t.Parallel()
	r := newRelayRun()
	r.in.Deliveries[2].V = 7
	r.in.Ledger = append(r.in.Ledger, chaos.LedgerEntry{ID: uuid.New(), Key: "k2", V: 3, Xid: 101, Seq: 4})
	r.in.Deliveries = append(r.in.Deliveries, chaos.Delivery{ID: r.in.Ledger[3].ID, Key: "k2", V: 3, Replica: "r1", At: at(32)})
	_, v := violations(t, r.in)
	require.Contains(t, v, "mismatch: "+r.b.String()+" delivered by r1 as k1 v7, committed as k1 v2")
	require.Contains(t, v, "ledger: key k2 has versions [1 3], want 1..2")
}

func TestCheckRelayNeverDrained(t *testing.T) {
	t.Parallel()
	r := newRelayRun()
	r.in.Drained = time.Time{}
	rep, v := violations(t, r.in)
	require.Contains(t, v, "not every committed event was delivered")
	require.Equal(t, "never", figure(rep, "time to drain"))
}

// figure returns the report's figure named name.
func figure(rep chaos.RelayReport, name string) string {
	for _, f := range rep.Figures() {
		if f[0] == name {
			return f[1]
		}
	}
	return ""
}

func TestDeliveryRecordsRoundTrip(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "r1.log")
	rec, err := chaos.NewRecorder(path, "r1")
	require.NoError(t, err)
	id, tok := uuid.New(), uuid.New()
	require.NoError(t, rec.WriteDelivery(chaos.Delivery{ID: id, Key: "k7", V: 3, Call: 4}))
	require.NoError(t, rec.WriteDelivery(chaos.Delivery{ID: id, Key: "k7", V: 3, Call: 5, Token: tok}))
	require.ErrorContains(t, rec.WriteDelivery(chaos.Delivery{ID: id, Key: "a b", V: 1}), "without white space")
	require.NoError(t, rec.Close())
	ds, err := chaos.ReadDeliveries(path)
	require.NoError(t, err)
	require.Len(t, ds, 2)
	require.Equal(t, chaos.Delivery{ID: id, Key: "k7", V: 3, Replica: "r1", Call: 4, At: ds[0].At}, ds[0])
	require.Equal(t, tok, ds[1].Token)
	require.False(t, ds[1].At.Before(ds[0].At))
}

func TestCheckRelayDuplicateByZombie(t *testing.T) {
	t.Parallel()
	r := newRelayRun()
	t2 := uuid.New()
	// r1 took the group and was paused past its lease holding a; r2 took
	// it, published everything and moved; r1 woke and published a before
	// learning of the loss (its move was fenced off).
	r.in.Cursor = []chaos.CursorEntry{r.in.Cursor[0], r.in.Cursor[1], take("r2", r.t1, t2, 1, 15), move("r2", t2, 1, 3, 40)}
	r.in.Deliveries = []chaos.Delivery{
		{ID: r.a, Key: "k1", V: 1, Replica: "r2", At: at(20)},
		{ID: r.b, Key: "k1", V: 2, Replica: "r2", At: at(21)},
		{ID: r.c, Key: "k2", V: 1, Replica: "r2", At: at(22)},
		{ID: r.a, Key: "k1", V: 1, Replica: "r1", At: at(50)},
	}
	rep, v := violations(t, r.in)
	require.Empty(t, v, rep.String())
	require.Contains(t, rep.Duplicates[0].Cause, "lease of r1 lost before it published again (group taken by r2")

	// Without r2's take, r1 published all three, moved past them, and
	// published a again under the same token: unexplained.
	r.in.Cursor = []chaos.CursorEntry{r.in.Cursor[0], r.in.Cursor[1], move("r1", r.t1, 1, 3, 40)}
	r.in.Deliveries[0].Replica, r.in.Deliveries[1].Replica, r.in.Deliveries[2].Replica = "r1", "r1", "r1"
	rep, v = violations(t, r.in)
	require.Equal(t, 1, rep.Unexplained(), rep.String())
	require.Contains(t, v, "r1's token moved the cursor past it (1 → 3")
}
