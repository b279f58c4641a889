package admin_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// relayBundle is one test's migrated log (outbox.KindLog) and a Relay on
// it. The ticks, cursors and parked rows are written with plain SQL.
type relayBundle struct {
	db    *testdb.DB
	names sqlname.Names
	relay *admin.Relay
}

func setupRelay(t *testing.T) *relayBundle {
	t.Helper()
	db := testdb.New(t)
	log := outbox.Table{Schema: db.Schema, Name: "events_log"}
	require.NoError(t, migrations.Migrate(context.Background(), db.Pool, migrations.Config{Table: log, Kind: outbox.KindLog}))
	names, err := sqlname.For(log)
	require.NoError(t, err)
	r, err := admin.NewRelay(db.Pool, admin.RelayConfig{Log: log})
	require.NoError(t, err)
	return &relayBundle{db: db, names: names, relay: r}
}

func (b *relayBundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := b.db.Pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err, sql)
}

// tick records tick id, lastSeq, taken agoSeconds ago.
func (b *relayBundle) tick(t *testing.T, id, lastSeq int64, agoSeconds int) {
	t.Helper()
	b.exec(t, `INSERT INTO `+b.names.Log(sqlname.SuffixTicks)+` (tick_id, snapshot, tick_time, last_seq, sysid)
		VALUES ($1, pg_current_snapshot(), now() - make_interval(secs => $3), $2, 0)`, id, lastSeq, agoSeconds)
}

// park parks event seq of key in group (and the key).
func (b *relayBundle) park(t *testing.T, group, key string, seq int64) {
	t.Helper()
	b.exec(t, `INSERT INTO `+b.names.Log(sqlname.SuffixParkedKeys)+` (grp, key, error_code, error) VALUES ($1, $2, 'refused', 'no')
		ON CONFLICT DO NOTHING`, group, key)
	b.exec(t, `INSERT INTO `+b.names.Log(sqlname.SuffixParked)+` (grp, seq, xid, id, event_type, partition_key, payload, headers,
		created_at, key, error_code, error)
		VALUES ($1, $3, '7', gen_random_uuid(), 'order.paid', $2, 'secret', '{"h":"v"}', now(), $2, 'refused', 'no')`, group, key, seq)
}

func TestRelayGroupsShowPositionLagAndLease(t *testing.T) {
	b := setupRelay(t)
	ctx := context.Background()
	b.tick(t, 2, 10, 30)
	b.tick(t, 3, 25, 20)
	b.tick(t, 4, 40, 10)
	require.NoError(t, b.relay.CreateGroup(ctx, "billing", admin.FromOldest))
	require.NoError(t, b.relay.CreateGroup(ctx, "search", admin.FromLatest))
	b.exec(t, `UPDATE `+b.names.Log(sqlname.SuffixCursors)+` SET last_tick = 2, owner = 'replica-1',
		lease_until = now() + interval '1 minute', stopped_reason = 'snapshot went backwards' WHERE grp = 'billing'`)
	b.park(t, "billing", "k1", 5)

	groups, err := b.relay.Groups(ctx)
	require.NoError(t, err)
	require.Len(t, groups, 2)
	billing, search := groups[0], groups[1]
	require.Equal(t, "billing", billing.Name)
	require.Equal(t, int64(2), billing.LastTick)
	require.Equal(t, int64(30), billing.LagEvents) // 40 - 10
	require.InDelta(t, 20, billing.LagSeconds, 5)  // tick 3, the first after the cursor
	require.True(t, billing.Leased)
	require.Equal(t, "replica-1", billing.Owner)
	require.Equal(t, "snapshot went backwards", billing.StoppedReason)
	require.Equal(t, int64(1), billing.ParkedKeys)
	require.Equal(t, int64(4), search.LastTick)
	require.Zero(t, search.LagEvents)
	require.Zero(t, search.LagSeconds)
	require.False(t, search.Leased)

	was, err := b.relay.Resume(ctx, "billing")
	require.NoError(t, err)
	require.Equal(t, "snapshot went backwards", was)
	g, err := b.relay.Group(ctx, "billing")
	require.NoError(t, err)
	require.Empty(t, g.StoppedReason)

	st, err := b.relay.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(4), st.NewestTick)
	require.Equal(t, 16, st.Parts)
	require.Greater(t, st.HeadroomXids, uint64(14*sqlname.LogPartXids))
	require.Len(t, st.Groups, 2)
}

func TestRelayUnknownGroupAndKey(t *testing.T) {
	b := setupRelay(t)
	ctx := context.Background()
	require.NoError(t, b.relay.CreateGroup(ctx, "g", admin.FromLatest))
	require.ErrorIs(t, b.relay.CreateGroup(ctx, "g", admin.FromOldest), admin.ErrGroupExists)

	_, err := b.relay.Group(ctx, "nope")
	require.ErrorIs(t, err, admin.ErrUnknownGroup)
	_, err = b.relay.Resume(ctx, "nope")
	require.ErrorIs(t, err, admin.ErrUnknownGroup)
	require.ErrorIs(t, b.relay.DropGroup(ctx, "nope"), admin.ErrUnknownGroup)
	require.ErrorIs(t, b.relay.RequestReplay(ctx, "nope", "k"), admin.ErrUnknownGroup)
	err = b.relay.RequestSkip(ctx, "g", "k")
	require.ErrorIs(t, err, admin.ErrUnknownKey)
	require.Contains(t, err.Error(), `group "g" key "k"`)
	_, err = b.relay.ParkedKeys(ctx, "nope", admin.ParkedKeysQuery{})
	require.ErrorIs(t, err, admin.ErrUnknownGroup)
	_, err = b.relay.ParkedEvents(ctx, "nope", admin.ParkedEventsQuery{})
	require.ErrorIs(t, err, admin.ErrUnknownGroup)

	err = b.relay.CreateGroup(ctx, "", admin.FromLatest)
	require.ErrorIs(t, err, outbox.ErrInvalidInput)
	_, err = b.relay.ParkedKeys(ctx, "g", admin.ParkedKeysQuery{Limit: admin.MaxParkedLimit + 1})
	require.ErrorIs(t, err, outbox.ErrInvalidInput)
}

func TestRelayParkedPagesAndRequests(t *testing.T) {
	b := setupRelay(t)
	ctx := context.Background()
	require.NoError(t, b.relay.CreateGroup(ctx, "g", admin.FromLatest))
	b.park(t, "g", "a", 1)
	b.park(t, "g", "a", 4)
	b.park(t, "g", "b", 2)
	b.park(t, "g", "c", 3)

	page, err := b.relay.ParkedKeys(ctx, "g", admin.ParkedKeysQuery{Limit: 2})
	require.NoError(t, err)
	require.Len(t, page, 2)
	require.Equal(t, "a", page[0].Key)
	require.Equal(t, int64(2), page[0].Events)
	require.Equal(t, "refused", page[0].ErrorCode)
	page, err = b.relay.ParkedKeys(ctx, "g", admin.ParkedKeysQuery{After: page[1].Key, Limit: 2})
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.Equal(t, "c", page[0].Key)

	events, err := b.relay.ParkedEvents(ctx, "g", admin.ParkedEventsQuery{Key: "a"})
	require.NoError(t, err)
	require.Len(t, events, 2)
	require.Equal(t, []int64{1, 4}, []int64{events[0].Seq, events[1].Seq})
	require.Equal(t, 6, events[0].PayloadSize)
	require.Nil(t, events[0].Payload, "payload read without WithPayload")
	require.Equal(t, uint64(7), events[0].Xid)
	events, err = b.relay.ParkedEvents(ctx, "g", admin.ParkedEventsQuery{AfterSeq: 1, Limit: 1, WithPayload: true})
	require.NoError(t, err)
	require.Len(t, events, 1)
	require.Equal(t, int64(2), events[0].Seq)
	require.Equal(t, []byte("secret"), events[0].Payload)
	require.Equal(t, map[string]string{"h": "v"}, events[0].Headers)

	require.NoError(t, b.relay.RequestReplay(ctx, "g", "a"))
	require.NoError(t, b.relay.RequestSkip(ctx, "g", "b"))
	page, err = b.relay.ParkedKeys(ctx, "g", admin.ParkedKeysQuery{})
	require.NoError(t, err)
	require.NotNil(t, page[0].ReplayRequestedAt)
	require.Nil(t, page[0].SkipRequestedAt)
	require.NotNil(t, page[1].SkipRequestedAt)
	require.Nil(t, page[2].ReplayRequestedAt)
	require.NoError(t, b.relay.RequestSkip(ctx, "g", "a")) // the latest request wins
	page, err = b.relay.ParkedKeys(ctx, "g", admin.ParkedKeysQuery{Limit: 1})
	require.NoError(t, err)
	require.Nil(t, page[0].ReplayRequestedAt)
	require.NotNil(t, page[0].SkipRequestedAt)
}

func TestRelayDropGroupTakesItsParkedRows(t *testing.T) {
	b := setupRelay(t)
	ctx := context.Background()
	require.NoError(t, b.relay.CreateGroup(ctx, "g", admin.FromLatest))
	require.NoError(t, b.relay.CreateGroup(ctx, "other", admin.FromLatest))
	b.park(t, "g", "a", 1)
	b.park(t, "other", "a", 1)
	require.NoError(t, b.relay.DropGroup(ctx, "g"))
	var n int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+b.names.Log(sqlname.SuffixParked)+`)
		+ (SELECT count(*) FROM `+b.names.Log(sqlname.SuffixParkedKeys)+`)`).Scan(&n))
	require.Equal(t, 2, n, "the other group's parked rows stay")
	groups, err := b.relay.Groups(ctx)
	require.NoError(t, err)
	require.Len(t, groups, 1)
}

func TestRelayMaintainRetiresPassedParts(t *testing.T) {
	b := setupRelay(t)
	ctx := context.Background()
	p := uint64(sqlname.LogPartXids)
	b.exec(t, `INSERT INTO `+b.names.Qualified+` (xid, id, event_type) VALUES ($1::text::xid8, gen_random_uuid(), 't')`,
		strconv.FormatUint(2*p+1, 10))
	b.exec(t, `INSERT INTO `+b.names.Log(sqlname.SuffixTicks)+` (tick_id, snapshot, last_seq, sysid)
		VALUES (2, ($1 || ':' || $1 || ':')::pg_snapshot, 1, 0)`, strconv.FormatUint(3*p, 10))
	res, err := b.relay.Maintain(ctx)
	require.NoError(t, err)
	require.Equal(t, admin.MaintainResult{}, res, "no group: nothing retired")

	require.NoError(t, b.relay.CreateGroup(ctx, "g", admin.FromLatest)) // at tick 2
	res, err = b.relay.Maintain(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Truncated)
	require.Equal(t, int64(1), res.TicksDeleted) // tick 1
	require.True(t, res.Owner)

	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	inTx, err := admin.NewRelay(tx, admin.RelayConfig{Log: b.names.Table})
	require.NoError(t, err)
	_, err = inTx.Maintain(ctx)
	require.ErrorIs(t, err, outbox.ErrInvalidInput)
}
