package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
)

// replay, skip and purge with -yes each write one audit row naming
// $USER@host and source outboxctl; their dry runs write none. audit lists
// the rows newest first, a page at a time, as a table or JSON.
func TestAudit(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	failed := insert(t, db, "FAILED", "a", 3)
	insert(t, db, "SENT", "a", 2)

	r := onDB(t, db, "audit")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "0 entries; no more pages")

	for _, args := range [][]string{
		{"replay", failed[0].String()}, {"skip", failed[1].String()}, {"purge", "-status", "sent", "-older-than", "30m"},
	} {
		r = onDB(t, db, args[0], args[1:]...)
		require.Equal(t, 0, r.code, r.stderr)
		r = onDB(t, db, args[0], append(args[1:], "-yes")...)
		require.Equal(t, 0, r.code, r.stderr)
	}

	r = onDB(t, db, "audit", "-json")
	require.Equal(t, 0, r.code, r.stderr)
	var page admin.AuditPage
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	require.Len(t, page.Entries, 3, "the dry runs are not audited")
	who := actor()
	for i, action := range []string{admin.ActionPurge, admin.ActionSkip, admin.ActionReplay} {
		e := page.Entries[i]
		require.Equal(t, action, e.Action)
		require.Equal(t, who.Name, e.Actor)
		require.Equal(t, admin.SourceOutboxctl, e.Source)
	}
	require.Equal(t, int64(2), page.Entries[0].Rows, "two SENT events purged")
	require.Equal(t, []any{failed[0].String()}, page.Entries[2].Filter["ids"])

	r = onDB(t, db, "audit", "-limit", "2")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `ID\s+AT\s+ACTOR\s+SOURCE\s+ACTION\s+ROWS\s+FILTER`, r.stdout)
	require.Contains(t, r.stdout, "purge")
	require.NotContains(t, r.stdout, "replay")
	next := regexpFind(t, `next page: -after (\d+)`, r.stdout)
	r = onDB(t, db, "audit", "-limit", "2", "-after", next)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "replay")
	require.Contains(t, r.stdout, `{"ids":["`+failed[0].String()+`"]}`)
	require.Contains(t, r.stdout, "1 entry; no more pages")

	r = onDB(t, db, "audit", "-after", "-1")
	require.Equal(t, exitUsage, r.code)
}

// actor names $USER (else "unknown") at the host, and its control
// characters never reach the terminal through audit's table.
func TestActorAndCell(t *testing.T) {
	t.Parallel()
	a := actor()
	require.Equal(t, admin.SourceOutboxctl, a.Source)
	require.Contains(t, a.Name, "@")
	require.Equal(t, "plain text", cell("plain text"))
	require.Equal(t, `"\x1b[31mred\nline"`, cell("\x1b[31mred\nline"))
}

// list -key and -created-after/-created-before filter by order key and
// creation time; a bad time is a usage error.
func TestListKeyAndTime(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	ctx := context.Background()
	ids := insert(t, db, "PENDING", "a", 2)
	_, err := db.Pool.Exec(ctx, `UPDATE outbox_events SET partition_key = 'k1', created_at = now() - interval '2 hours' WHERE id = $1`, ids[0])
	require.NoError(t, err)

	r := onDB(t, db, "list", "-key", "k1")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, ids[0].String())
	require.NotContains(t, r.stdout, ids[1].String())

	hourAgo := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	r = onDB(t, db, "list", "-created-after", hourAgo)
	require.Equal(t, 0, r.code, r.stderr)
	require.NotContains(t, r.stdout, ids[0].String())
	require.Contains(t, r.stdout, ids[1].String())
	r = onDB(t, db, "list", "-created-before", hourAgo)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, ids[0].String())
	require.NotContains(t, r.stdout, ids[1].String())

	r = onDB(t, db, "list", "-created-after", "yesterday")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "-created-after")
	r = onDB(t, db, "list", "-created-after", hourAgo, "-created-before", hourAgo)
	require.Equal(t, exitUsage, r.code)
	require.True(t, strings.Contains(r.stderr, "-created-before"), r.stderr)
}

// On a schema without the audit table (version 12), replay, skip and
// purge with -yes fail with an error naming outboxctl migrate and
// -no-audit and change nothing; with -no-audit they run, unaudited.
func TestNoAuditTable(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	failed := insert(t, db, "FAILED", "a", 2)
	insert(t, db, "SENT", "a", 1)
	_, err := db.Pool.Exec(context.Background(), "DROP TABLE outbox_events_audit")
	require.NoError(t, err)

	for _, args := range [][]string{
		{"replay", failed[0].String()}, {"skip", failed[1].String()}, {"purge", "-status", "sent", "-older-than", "30m"},
	} {
		r := onDB(t, db, args[0], append(args[1:], "-yes")...)
		require.NotEqual(t, 0, r.code, args)
		require.Contains(t, r.stderr, "table does not exist", args)
		require.Contains(t, r.stderr, "outboxctl migrate", args)
		require.Contains(t, r.stderr, "-no-audit", args)
	}
	require.Equal(t, 2, count(t, db, "FAILED"))
	require.Equal(t, 1, count(t, db, "SENT"))

	for _, args := range [][]string{
		{"replay", failed[0].String()}, {"skip", failed[1].String()}, {"purge", "-status", "sent", "-older-than", "30m"},
	} {
		r := onDB(t, db, args[0], append(args[1:], "-yes", "-no-audit")...)
		require.Equal(t, 0, r.code, r.stderr)
	}
	require.Equal(t, 1, count(t, db, "FAILED"))
	require.Equal(t, 0, count(t, db, "SENT"))
}
