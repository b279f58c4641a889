package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/migrations"
)

// result is one in-process run of outboxctl.
type result struct {
	code           int
	stdout, stderr string
}

// ctl runs outboxctl with args, without -url/-schema (for usage tests).
func ctl(t *testing.T, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// onDB runs a command against the test's schema, with any further flags.
func onDB(t *testing.T, db *testdb.DB, cmd string, args ...string) result {
	t.Helper()
	return ctl(t, append([]string{cmd, "-url", db.URL, "-schema", db.Schema}, args...)...)
}

// insert adds rows with plain SQL: status and event type per row, with
// timestamps an hour old. A SENT row goes to the history, a FAILED row to
// the dead letters (schema version 10), with a seq from the outbox's.
func insert(t *testing.T, db *testdb.DB, status, typ string, n int) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, n)
	table, seq := homeOf(status)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
		_, err := db.Pool.Exec(context.Background(), `INSERT INTO `+table+`
	(`+seq+`id, event_type, status, payload, headers, last_error_code, lock_token, lease_until, sent_at, failed_at)
VALUES (`+seqValue(seq)+`$1, $2, $3, '{"n":1}', '{"h":"v"}', CASE WHEN $3 = 'FAILED' THEN 'handler_error' END,
	CASE WHEN $3 = 'PROCESSING' THEN gen_random_uuid() END, CASE WHEN $3 = 'PROCESSING' THEN now() + interval '1 hour' END,
	CASE WHEN $3 = 'SENT' THEN now() - interval '1 hour' END, CASE WHEN $3 = 'FAILED' THEN now() - interval '1 hour' END)`,
			ids[i], typ, status)
		require.NoError(t, err)
	}
	return ids
}

// homeOf returns the table where a row of status lives, and "seq, " when
// the insert must give its seq (every table but the outbox's).
func homeOf(status string) (table, seq string) {
	switch status {
	case "SENT":
		return "outbox_events_sent", "seq, "
	case "FAILED":
		return "outbox_events_dead", "seq, "
	}
	return "outbox_events", ""
}

// seqValue is the value of the seq column that homeOf asked for: the
// outbox's next seq.
func seqValue(seq string) string {
	if seq == "" {
		return ""
	}
	return "nextval(pg_get_serial_sequence('outbox_events', 'seq')), "
}

// allRows is every row of the outbox: the outbox table, the dead letters
// and the history (same columns, same order).
const allRows = `(SELECT * FROM outbox_events UNION ALL SELECT * FROM outbox_events_dead
	UNION ALL SELECT * FROM outbox_events_sent)`

// updateAll runs stmt, written on outbox_events, on each of the three
// tables.
func updateAll(t *testing.T, db *testdb.DB, stmt string, args ...any) {
	t.Helper()
	for _, table := range []string{"outbox_events", "outbox_events_dead", "outbox_events_sent"} {
		_, err := db.Pool.Exec(context.Background(), strings.ReplaceAll(stmt, "outbox_events", table), args...)
		require.NoError(t, err)
	}
}

func count(t *testing.T, db *testdb.DB, status string) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+allRows+" AS o WHERE status = $1", status).Scan(&n))
	return n
}

// Rows still in the outbox table with status SENT or FAILED (strays)
// show on a row of their own in counts and status, counted in the total
// once, and in counts -json.
func TestCountsUnmoved(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	insert(t, db, "SENT", "a", 1)
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO outbox_events (id, event_type, status, sent_at)
		VALUES (gen_random_uuid(), 'a', 'SENT', now()), (gen_random_uuid(), 'a', 'FAILED', NULL)`)
	require.NoError(t, err)
	for _, cmd := range []string{"counts", "status"} {
		r := onDB(t, db, cmd)
		require.Equal(t, 0, r.code, r.stderr)
		require.Regexp(t, `(?m)^SENT\s+1$`, r.stdout, cmd)
		require.Regexp(t, `(?m)^FAILED\s+0$`, r.stdout, cmd)
		require.Regexp(t, `(?m)^unmoved\s+2$`, r.stdout, cmd)
		require.Regexp(t, `(?m)^total\s+3$`, r.stdout, cmd)
		require.Contains(t, r.stdout, "unmoved: SENT or FAILED events still in the outbox table", cmd)
	}
	r := onDB(t, db, "counts", "-json")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, `"unmoved": 2`)
}

func TestCounts(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	insert(t, db, "PENDING", "a", 2)
	insert(t, db, "FAILED", "a", 3)
	insert(t, db, "PENDING", "order.cancelled", 1)

	r := onDB(t, db, "counts")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^PENDING\s+3$`, r.stdout)
	require.Regexp(t, `(?m)^FAILED\s+3$`, r.stdout)
	require.Regexp(t, `(?m)^total\s+6$`, r.stdout)
	require.NotContains(t, r.stdout, "unmoved", "no strays: no row for them")
	require.Contains(t, r.stdout, "oldest due event waiting:")
	require.Regexp(t, `(?m)^PENDING BY TYPE\s+PENDING\s+DUE\s+OLDEST DUE WAITING\s+OLDEST PENDING AGE$`, r.stdout)
	require.Regexp(t, `(?m)^a\s+2\s+2\s+\S+\s+\S+$`, r.stdout)
	require.Regexp(t, `(?m)^order\.cancelled\s+1\s+1\s+\S+\s+\S+$`, r.stdout)

	r = onDB(t, db, "counts", "-json")
	require.Equal(t, 0, r.code, r.stderr)
	var c struct {
		Pending, Failed, Due int64
		PendingByType        []struct {
			Type         string
			Pending, Due int64
		} `json:"pending_by_type"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &c))
	require.Equal(t, int64(3), c.Pending)
	require.Equal(t, int64(3), c.Failed)
	require.Equal(t, int64(3), c.Due)
	require.Len(t, c.PendingByType, 2)
	require.Equal(t, "order.cancelled", c.PendingByType[1].Type)
	require.Equal(t, int64(1), c.PendingByType[1].Due)
}

func TestList(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	a := insert(t, db, "PENDING", "a", 3)
	f := insert(t, db, "FAILED", "b", 1)

	r := onDB(t, db, "list", "-limit", "2")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `ATTEMPTS\s+SNOOZES\s+NEXT_ATTEMPT_AT`, r.stdout)
	require.Contains(t, r.stdout, a[0].String())
	require.Contains(t, r.stdout, a[1].String())
	require.NotContains(t, r.stdout, a[2].String())
	m := regexpFind(t, `next page: -after (\d+)`, r.stdout)

	r = onDB(t, db, "list", "-limit", "2", "-after", m)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, a[2].String())
	require.Contains(t, r.stdout, f[0].String())
	require.Contains(t, r.stdout, "no more pages")

	r = onDB(t, db, "list", "-status", "failed", "-json")
	require.Equal(t, 0, r.code, r.stderr)
	var page struct {
		Events []struct {
			ID      uuid.UUID
			Status  string
			Snoozes *int
		}
		Next string
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	require.Len(t, page.Events, 1)
	require.Equal(t, f[0], page.Events[0].ID)
	require.NotNil(t, page.Events[0].Snoozes, "the JSON holds snoozes")
	require.Empty(t, page.Next)

	r = onDB(t, db, "list", "-type", "b")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, f[0].String())
	require.NotContains(t, r.stdout, a[0].String())
}

func regexpFind(t *testing.T, pattern, s string) string {
	t.Helper()
	m := regexp.MustCompile(pattern).FindStringSubmatch(s)
	require.NotNil(t, m, "%q not in %q", pattern, s)
	return m[1]
}

func TestInspect(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	id := insert(t, db, "FAILED", "order.created", 1)[0]
	updateAll(t, db, `UPDATE outbox_events SET snoozes = 42`)

	for _, args := range [][]string{{id.String()}, {"-id", id.String()}} {
		r := onDB(t, db, "inspect", args...)
		require.Equal(t, 0, r.code, r.stderr)
		require.Regexp(t, `snoozes:\s+42\n`, r.stdout)
		require.Contains(t, r.stdout, "order.created")
		require.Contains(t, r.stdout, `{"n":1}`)
		require.Contains(t, r.stdout, "h: v")
		require.Contains(t, r.stdout, "handler_error")
	}

	r := onDB(t, db, "inspect", "-json", id.String())
	require.Equal(t, 0, r.code, r.stderr)
	var d struct {
		ID      uuid.UUID
		Payload []byte
		Headers map[string]string
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &d))
	require.Equal(t, id, d.ID)
	require.Equal(t, []byte(`{"n":1}`), d.Payload)

	r = onDB(t, db, "inspect", uuid.NewString())
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, ": event not found")
	require.Equal(t, 1, strings.Count(r.stderr, "admin:"), r.stderr)
}

// A dead letter whose id the outbox table already holds stays a dead
// letter: replay says so, in its dry run and its run.
func TestReplayConflict(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	failed := insert(t, db, "FAILED", "a", 2)
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO outbox_events (id, event_type) VALUES ($1, 'a')`, failed[0])
	require.NoError(t, err)

	r := onDB(t, db, "replay")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "dry run: would replay 1 FAILED event in")
	require.Contains(t, r.stdout, "; 1 event would stay dead letters (the outbox table already holds their id)")
	r = onDB(t, db, "replay", "-json")
	require.JSONEq(t, `{"dry_run": true, "would_replay": 1, "skipped": 0, "conflicts": 1}`, r.stdout)

	r = onDB(t, db, "replay", "-yes", "-id", failed[0].String(), "-id", failed[1].String())
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "replayed "+failed[1].String())
	require.Contains(t, r.stdout, "kept     "+failed[0].String())
	require.NotContains(t, r.stdout, "skipped  ")
	require.Contains(t, r.stdout, "1 event replayed, 1 skipped\n1 event kept as dead letters")
	require.Equal(t, 1, count(t, db, "FAILED"))
}

func TestReplay(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	failed := insert(t, db, "FAILED", "a", 3)
	sent := insert(t, db, "SENT", "a", 1)

	r := onDB(t, db, "replay", "-id", failed[0].String()+","+sent[0].String())
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "dry run: would replay 1 FAILED event in")
	require.Contains(t, r.stdout, "1 of the named ids would be skipped")
	require.Equal(t, 3, count(t, db, "FAILED"), "a dry run changes nothing")

	r = onDB(t, db, "replay", "-yes", "-id", failed[0].String(), "-id", sent[0].String())
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "replayed "+failed[0].String())
	require.Contains(t, r.stdout, "skipped  "+sent[0].String())
	require.Equal(t, 2, count(t, db, "FAILED"))

	r = onDB(t, db, "replay", "-type", "a", "-code", "handler_error", "-json")
	require.Equal(t, 0, r.code, r.stderr)
	require.JSONEq(t, `{"dry_run": true, "would_replay": 2, "skipped": 0}`, r.stdout)

	r = onDB(t, db, "replay", "-yes", "-limit", "1", "-failed-before", time.Now().Add(time.Hour).Format(time.RFC3339), "-json")
	require.Equal(t, 0, r.code, r.stderr)
	var res struct{ Replayed []uuid.UUID }
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
	require.Len(t, res.Replayed, 1)
	require.Equal(t, 1, count(t, db, "FAILED"))
	require.Equal(t, 2, count(t, db, "PENDING"))
}

func TestPurge(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	insert(t, db, "SENT", "a", 3)
	insert(t, db, "PENDING", "a", 1)
	insert(t, db, "PROCESSING", "a", 1)

	r := onDB(t, db, "purge", "-status", "sent", "-older-than", "30m")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "dry run: would delete 3 SENT events")
	require.Equal(t, 3, count(t, db, "SENT"))

	r = onDB(t, db, "purge", "-status", "sent", "-older-than", "2h", "-yes")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "deleted 0 SENT events")

	r = onDB(t, db, "purge", "-status", "SENT", "-older-than", "30m", "-limit", "2", "-yes", "-json")
	require.Equal(t, 0, r.code, r.stderr)
	require.JSONEq(t, `{"dry_run": false, "status": "SENT", "count": 2}`, r.stdout)
	require.Equal(t, 1, count(t, db, "SENT"))
	require.Equal(t, 1, count(t, db, "PENDING"))
	require.Equal(t, 1, count(t, db, "PROCESSING"))
}

func TestMigrateAndVerify(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)

	r := onDB(t, db, "verify")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stdout, "missing")
	require.Contains(t, r.stderr, "does not match")

	r = onDB(t, db, "verify", "-json")
	require.Equal(t, 1, r.code)
	var v struct {
		OK       bool
		Problems []struct{ Object string }
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v))
	require.False(t, v.OK)
	require.NotEmpty(t, v.Problems)

	r = onDB(t, db, "migrate")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, fmt.Sprintf("is at schema version %d", migrations.Latest()))

	r = onDB(t, db, "verify")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "matches schema version")

	r = onDB(t, db, "migrate", "-table", "other_events", "-json")
	require.Equal(t, 0, r.code, r.stderr)
	require.JSONEq(t, fmt.Sprintf(`{"table": "%s.other_events", "version": %d}`, db.Schema, migrations.Latest()), r.stdout)
}

func TestBadUsage(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	failed := insert(t, db, "FAILED", "a", 1)
	insert(t, db, "SENT", "a", 1)

	cases := map[string][]string{
		"UnknownFlag":           {"counts", "-nope"},
		"BadLimit":              {"list", "-limit", "0"},
		"BadStatus":             {"list", "-status", "done"},
		"BadCursor":             {"list", "-after", "x"},
		"ExtraArg":              {"counts", "extra"},
		"InspectNoID":           {"inspect"},
		"InspectBadID":          {"inspect", "not-a-uuid"},
		"ReplayBadID":           {"replay", "-id", "nope"},
		"ReplayIDAndFilter":     {"replay", "-yes", "-id", failed[0].String(), "-type", "a"},
		"ReplayBadTime":         {"replay", "-failed-before", "yesterday"},
		"ReplayLimitTooLarge":   {"replay", "-yes", "-limit", "10001"},
		"PurgePending":          {"purge", "-yes", "-status", "pending", "-older-than", "0s"},
		"PurgeNoStatus":         {"purge", "-yes", "-older-than", "0s"},
		"PurgeNoOlderThan":      {"purge", "-yes", "-status", "sent"},
		"PurgeNegativeDuration": {"purge", "-yes", "-status", "sent", "-older-than", "-1h"},
		"PurgeLimitTooLarge":    {"purge", "-yes", "-status", "sent", "-older-than", "0s", "-limit", "100001"},
		"BadTable":              {"counts", "-table", "Bad-Name"},
		"BlockedBadLimit":       {"blocked", "-limit", "1001"},
		"BlockedBadAfter":       {"blocked", "-after", "a\x00"},
		"SkipNoID":              {"skip", "-yes"},
		"SkipBadID":             {"skip", "-yes", "nope"},
		"SkipBadIDFlag":         {"skip", "-yes", "-id", "nope"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			r := onDB(t, db, args[0], args[1:]...)
			require.Equal(t, 2, r.code, "stdout %q stderr %q", r.stdout, r.stderr)
			require.Contains(t, r.stderr, "usage: outboxctl "+args[0])
			require.Empty(t, r.stdout)
		})
	}
	require.Equal(t, 1, count(t, db, "FAILED"))
	require.Equal(t, 1, count(t, db, "SENT"))

	r := ctl(t)
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, usageLine)
	r = ctl(t, "frobnicate")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, usageLine)
	r = ctl(t, "counts", "-url", "")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "no database")
}

// TestPasswordNeverPrinted runs commands with a password in -url, on
// success and on every kind of failure, and looks for it in the output.
func TestPasswordNeverPrinted(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	const pw = "Hunter2-s3cret"
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), pw)
	dead := *u
	dead.Host = "127.0.0.1:1"

	urls := map[string]string{
		"Refused":       dead.String(),
		"Unparsable":    "postgres://u:" + pw + "@host:notaport/db",
		"KeywordValue":  "host=127.0.0.1 port=1 user=u password=" + pw + " connect_timeout=2",
		"UnknownOption": "postgres://u:" + pw + "@127.0.0.1:1/db?bogus_option=%zz",
	}
	if _, has := mustURL(t, db.URL).User.Password(); !has {
		urls["Trust"] = u.String() // trust auth accepts any password
	}
	for name, raw := range urls {
		t.Run(name, func(t *testing.T) {
			for _, args := range [][]string{
				{"counts", "-url", raw, "-schema", db.Schema},
				{"list", "-url=" + raw, "-schema", db.Schema, "-json"},
				{"verify", "-schema", db.Schema, "-url", raw},
				{"purge", "-url", raw, "-bogus"},
			} {
				r := ctl(t, args...)
				all := r.stdout + r.stderr
				require.NotContains(t, all, pw, "password printed by %v", args[0])
				require.NotContains(t, all, url.QueryEscape(pw))
				if name == "Trust" && args[0] != "purge" {
					require.Equal(t, 0, r.code, r.stderr)
				} else {
					require.NotEqual(t, 0, r.code)
				}
			}
		})
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	require.NoError(t, err)
	return u
}

func TestRedactor(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	r := &redactor{w: &b, secrets: passwords([]string{"postgres://u:p%40ss@h/db", "password='a b'", ""})}
	_, err := r.Write([]byte("p@ss p%40ss a b"))
	require.NoError(t, err)
	require.Equal(t, strings.Repeat(mask+" ", 3)[:3*len(mask)+2], b.String())
}

// TestDatabaseURLFromEnv is not parallel: it sets DATABASE_URL.
func TestDatabaseURLFromEnv(t *testing.T) {
	db := testdb.NewMigrated(t)
	u := mustURL(t, db.URL)
	const pw = "env-Secret-77"
	if _, has := u.User.Password(); !has {
		u.User = url.UserPassword(u.User.Username(), pw) // trust auth accepts any password
	}
	t.Setenv("DATABASE_URL", u.String())
	secret, _ := u.User.Password()

	r := ctl(t, "counts", "-schema", db.Schema)
	require.Equal(t, 0, r.code, r.stderr)
	require.NotContains(t, r.stdout+r.stderr, secret)
	for _, args := range [][]string{{"counts", "-h"}, {"list", "-bogus"}, {"verify", "-schema", "nope_missing"}} {
		r := ctl(t, args...)
		require.NotContains(t, r.stdout+r.stderr, secret, "%v", args)
	}
}

// TestExecModes runs each command in each pgx query exec mode, set in the
// URL as users do, directly and through PgBouncer in transaction mode
// (migrate only directly: it needs a session).
func TestExecModes(t *testing.T) {
	t.Parallel()
	testdb.ForEachRoute(t, func(t *testing.T, route testdb.Route) {
		db := testdb.NewMigrated(t, testdb.KeyOrder)
		failed := insert(t, db, "FAILED", "a", 2)
		insert(t, db, "SENT", "a", 1)
		on := func(cmd string, args ...string) result {
			t.Helper()
			r := ctl(t, append([]string{cmd, "-url", db.RouteURL(t, route), "-schema", db.Schema}, args...)...)
			require.Equal(t, 0, r.code, "%s: %s", cmd, r.stderr)
			return r
		}

		require.Regexp(t, `(?m)^FAILED\s+2$`, on("counts").stdout)
		require.Regexp(t, `(?m)^handler_error\s+2$`, on("status").stdout)
		require.Contains(t, on("list", "-status", "failed").stdout, failed[1].String())
		require.Contains(t, on("inspect", failed[0].String()).stdout, "handler_error")
		require.Contains(t, on("replay", "-id", failed[0].String()).stdout, "dry run: would replay 1 FAILED event in")
		require.Contains(t, on("replay", "-yes", "-id", failed[0].String()).stdout, "replayed "+failed[0].String())
		require.Contains(t, on("replay", "-yes", "-type", "a").stdout, "replayed "+failed[1].String())
		require.Contains(t, on("purge", "-status", "sent", "-older-than", "30m", "-yes").stdout, "deleted 1 SENT event older")
		require.Contains(t, on("verify").stdout, "matches schema version")
		if route.Bouncer == nil {
			require.Contains(t, on("migrate", "-table", "other_events").stdout, "is at schema version")
		}
		require.Equal(t, 2, count(t, db, "PENDING"))
		head := insertKeyed(t, db, "FAILED", "k")
		require.Contains(t, on("blocked").stdout, head.String())
		require.Contains(t, on("skip", head.String()).stdout, "would skip 1 FAILED event")
		require.Contains(t, on("skip", "-yes", head.String()).stdout, "skipped "+head.String())
		require.Contains(t, on("blocked", "-after", "a").stdout, "0 blocked keys")
	})
}

// Past admin.SentCountLimit SENT rows, counts and status say the SENT
// count (and so the total) is an estimate, print it with "~", keep the
// other counts exact, and status leaves the SENT column of each type out.
func TestCountsEstimateSent(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO outbox_events_sent (seq, id, event_type, status, sent_at)
		SELECT nextval(pg_get_serial_sequence('outbox_events', 'seq')), gen_random_uuid(), 'old', 'SENT', now()
		FROM generate_series(1, $1::int)`, admin.SentCountLimit+500)
	require.NoError(t, err)
	_, err = db.Pool.Exec(context.Background(), `ANALYZE outbox_events_sent`)
	require.NoError(t, err)
	insert(t, db, "FAILED", "a", 2)

	r := onDB(t, db, "counts")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^SENT\s+~\d+$`, r.stdout)
	require.Regexp(t, `(?m)^FAILED\s+2$`, r.stdout)
	require.Regexp(t, `(?m)^total\s+~\d+$`, r.stdout)
	require.Contains(t, r.stdout, "SENT is estimated (more than 10000 rows; planner statistics), the other counts are exact")

	r = onDB(t, db, "counts", "-json")
	require.Equal(t, 0, r.code, r.stderr)
	var c admin.Counts
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &c))
	require.True(t, c.SentEstimated)
	require.InEpsilon(t, admin.SentCountLimit+500, c.Sent, 0.1)

	r = onDB(t, db, "status")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^a\s+0\s+0\s+0\s+-\s+2$`, r.stdout)
	require.NotRegexp(t, `(?m)^old\s`, r.stdout, "a type with SENT rows only is not listed when SENT is estimated")
	require.Contains(t, r.stdout, "SENT is estimated")
}

// insertKeyed adds one row of type "a" with aggregate id key, in status,
// and returns its id.
func insertKeyed(t *testing.T, db *testdb.DB, status, key string) uuid.UUID {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	table, seq := homeOf(status)
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO `+table+` (`+seq+`id, event_type, status, aggregate_id,
	last_error_code, failed_at) VALUES (`+seqValue(seq)+`$1, 'a', $2, $3, CASE WHEN $2 = 'FAILED' THEN 'handler_error' END,
	CASE WHEN $2 = 'FAILED' THEN now() END)`, id, status, key)
	require.NoError(t, err)
	return id
}

func TestBlockedAndSkip(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t, testdb.KeyOrder)
	headA := insertKeyed(t, db, "FAILED", "order-1")
	insertKeyed(t, db, "PENDING", "order-1")
	insertKeyed(t, db, "PENDING", "order-1")
	headB := insertKeyed(t, db, "FAILED", "aa 2")
	insertKeyed(t, db, "PENDING", "order-3")

	r := onDB(t, db, "blocked")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^KEY\s+HEAD_ID\s+TYPE\s+CODE\s+FAILED_AT\s+WAITING$`, r.stdout)
	require.Regexp(t, `(?m)^order-1\s+`+headA.String()+`\s+a\s+handler_error\s+\S+\s+2$`, r.stdout)
	require.Regexp(t, `(?m)^aa 2\s+`+headB.String()+`\s+a\s+handler_error\s+\S+\s+0$`, r.stdout)
	require.Contains(t, r.stdout, "2 blocked keys; no more pages")

	r = onDB(t, db, "blocked", "-by-type")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^order-1\s+`+headA.String()+`\s+a\s+handler_error\s+\S+\s+2$`, r.stdout)
	require.Contains(t, r.stdout, "2 blocked keys and types; no more pages")

	r = onDB(t, db, "blocked", "-limit", "1")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "1 blocked key; next page: -after 'aa 2'\n")
	r = onDB(t, db, "blocked", "-limit", "1", "-after", "aa 2", "-json")
	require.Equal(t, 0, r.code, r.stderr)
	var page admin.BlockedPage
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	require.Len(t, page.Keys, 1)
	require.Equal(t, headA, page.Keys[0].HeadID)
	require.Equal(t, 2, page.Keys[0].Waiting)

	r = onDB(t, db, "skip", headA.String())
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "dry run: would skip 1 FAILED event in")
	require.Contains(t, r.stdout, "run again with -yes")
	require.Contains(t, onDB(t, db, "blocked").stdout, "2 blocked keys", "a dry run changes nothing")

	pending := insertKeyed(t, db, "PENDING", "x")
	r = onDB(t, db, "skip", "-yes", headA.String(), pending.String())
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, pending.String()+" is PENDING, not FAILED")
	require.Contains(t, r.stderr, "nothing was written")
	require.Empty(t, r.stdout)
	require.Contains(t, onDB(t, db, "blocked").stdout, "2 blocked keys")

	r = onDB(t, db, "skip", "-yes", headA.String(), "-id", headB.String())
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "skipped "+headA.String())
	require.Contains(t, r.stdout, "2 events skipped")
	require.Contains(t, onDB(t, db, "blocked").stdout, "0 blocked keys; no more pages")
	require.Equal(t, 2, count(t, db, "FAILED"), "skipped events stay FAILED")

	r = onDB(t, db, "skip", "-yes", "-json", headA.String())
	require.Equal(t, 0, r.code, r.stderr)
	var res admin.SkipResult
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
	require.Equal(t, []uuid.UUID{headA}, res.Skipped)
	require.Len(t, res.At, 1)
}
