package main

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// logName is the log table the relay tests migrate.
const logName = "events_log"

// newLogDB is a test schema with a log (outbox.KindLog) named logName.
func newLogDB(t *testing.T) (*testdb.DB, sqlname.Names) {
	t.Helper()
	db := testdb.New(t)
	log := outbox.Table{Schema: db.Schema, Name: logName}
	require.NoError(t, migrations.Migrate(context.Background(), db.Pool, migrations.Config{Table: log, Kind: outbox.KindLog}))
	names, err := sqlname.For(log)
	require.NoError(t, err)
	return db, names
}

// relayCtl runs outboxctl relay args on the test's log.
func relayCtl(t *testing.T, db *testdb.DB, args ...string) result {
	t.Helper()
	return onDB(t, db, "relay", append(args, "-table", logName)...)
}

func execSQL(t *testing.T, db *testdb.DB, sql string, args ...any) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err, sql)
}

func TestRelayGroups(t *testing.T) {
	db, names := newLogDB(t)
	execSQL(t, db, `INSERT INTO `+names.Log(sqlname.SuffixTicks)+` (tick_id, snapshot, last_seq, sysid)
		VALUES (2, pg_current_snapshot(), 12, 0)`)

	res := relayCtl(t, db, "groups")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "no consumer groups")

	res = relayCtl(t, db, "group", "create", "-group", "billing", "-from", "oldest")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, `group "billing" created at the oldest tick`)
	res = relayCtl(t, db, "group", "create", "-group", "billing")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "relay group exists")

	res = relayCtl(t, db, "groups")
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `billing\s+1\s+-\s+12\s`, res.stdout)

	res = relayCtl(t, db, "status", "-json")
	require.Equal(t, 0, res.code, res.stderr)
	var st admin.RelayStatus
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &st))
	require.Equal(t, int64(2), st.NewestTick)
	require.Len(t, st.Groups, 1)
	require.Equal(t, int64(12), st.Groups[0].LagEvents)

	// outboxctl status on a log shows the relay's state.
	res = onDB(t, db, "status", "-table", logName)
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "(log)")
	require.Contains(t, res.stdout, "billing")

	execSQL(t, db, `UPDATE `+names.Log(sqlname.SuffixCursors)+` SET stopped_reason = 'database changed'`)
	res = relayCtl(t, db, "resume", "-group", "billing")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "database changed")

	res = relayCtl(t, db, "group", "drop", "-group", "billing")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "dry run")
	res = relayCtl(t, db, "group", "drop", "-group", "billing", "-yes")
	require.Equal(t, 0, res.code, res.stderr)
	res = relayCtl(t, db, "group", "drop", "-group", "billing", "-yes")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "no such relay group")
}

func TestRelayParkedReplaySkip(t *testing.T) {
	db, names := newLogDB(t)
	require.Equal(t, 0, relayCtl(t, db, "group", "create", "-group", "g").code)
	for i, key := range []string{"a", "a", "b"} {
		execSQL(t, db, `INSERT INTO `+names.Log(sqlname.SuffixParkedKeys)+` (grp, key, error_code) VALUES ('g', $1, 'refused')
			ON CONFLICT DO NOTHING`, key)
		execSQL(t, db, `INSERT INTO `+names.Log(sqlname.SuffixParked)+` (grp, seq, xid, id, event_type, payload, headers, created_at, key)
			VALUES ('g', $1, '9', gen_random_uuid(), 'order.paid', '{"n":1}', '{"h":"v"}', now(), $2)`, i+1, key)
	}

	res := relayCtl(t, db, "parked", "-group", "g", "-limit", "1")
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `a\s+2\s`, res.stdout)
	require.Contains(t, res.stdout, `next page: -after "a"`)
	res = relayCtl(t, db, "parked", "-group", "g", "-after", "a")
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `b\s+1\s`, res.stdout)

	res = relayCtl(t, db, "parked", "-group", "g", "-events", "-key", "a")
	require.Equal(t, 0, res.code, res.stderr)
	require.NotContains(t, res.stdout, `{"n":1}`, "payload printed without -payload")
	require.Contains(t, res.stdout, "2 events")
	res = relayCtl(t, db, "parked", "-group", "g", "-events", "-payload", "-after", "2")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, `{"n":1}`)
	require.Contains(t, res.stdout, "h=v")
	require.Contains(t, res.stdout, "1 event;")

	res = relayCtl(t, db, "replay", "-group", "g", "-key", "a")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "dry run")
	require.Contains(t, res.stdout, "2 parked events")
	res = relayCtl(t, db, "replay", "-group", "g", "-key", "a", "-yes")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "next batch boundary")
	res = relayCtl(t, db, "skip", "-group", "g", "-key", "b", "-yes")
	require.Equal(t, 0, res.code, res.stderr)
	res = relayCtl(t, db, "parked", "-group", "g")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "replay requested")
	require.Contains(t, res.stdout, "skip requested")

	res = relayCtl(t, db, "skip", "-group", "g", "-key", "zzz", "-yes")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "no such parked key")
}

func TestRelayMaintain(t *testing.T) {
	db, names := newLogDB(t)
	p := uint64(sqlname.LogPartXids)
	execSQL(t, db, `INSERT INTO `+names.Qualified+` (xid, id, event_type) VALUES ($1::text::xid8, gen_random_uuid(), 't')`,
		strconv.FormatUint(2*p+1, 10))
	execSQL(t, db, `INSERT INTO `+names.Log(sqlname.SuffixTicks)+` (tick_id, snapshot, last_seq, sysid)
		VALUES (2, ($1 || ':' || $1 || ':')::pg_snapshot, 1, 0)`, strconv.FormatUint(3*p, 10))
	require.Equal(t, 0, relayCtl(t, db, "group", "create", "-group", "g").code)
	res := relayCtl(t, db, "maintain", "-json")
	require.Equal(t, 0, res.code, res.stderr)
	var m admin.MaintainResult
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &m))
	require.Equal(t, 1, m.Truncated)
	require.Equal(t, int64(1), m.TicksDeleted)
}

func TestRelayBadUsage(t *testing.T) {
	for _, args := range [][]string{
		{"relay", "-url", "postgres://x@127.0.0.1/db"},
		{"relay", "bogus", "-url", "postgres://x@127.0.0.1/db"},
		{"relay", "group", "-url", "postgres://x@127.0.0.1/db"},
		{"relay", "parked", "-url", "postgres://x@127.0.0.1/db"},
		{"relay", "replay", "-group", "g", "-url", "postgres://x@127.0.0.1/db"},
		{"relay", "group", "create", "-group", "g", "-from", "middle", "-url", "postgres://x@127.0.0.1/db"},
		{"relay", "parked", "-group", "g", "-payload", "-url", "postgres://x@127.0.0.1/db"},
		{"relay", "status", "extra", "-url", "postgres://x@127.0.0.1/db"},
	} {
		res := ctl(t, args...)
		require.Equal(t, exitUsage, res.code, "%v: %s", args, res.stderr)
	}
}
