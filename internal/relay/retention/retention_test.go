package retention

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// P is the width of a part.
const P = sqlname.LogPartXids

// logDB is a test's migrated log. The log's parts 0..7 exist (newLog adds
// those Migrate did not, which attaches 16 from the current one), and ticks are written with made-up snapshots: their xmin decides
// which parts a cursor has passed.
type logDB struct {
	*testdb.DB
	names sqlname.Names
}

func newLog(t *testing.T) *logDB {
	t.Helper()
	db := testdb.New(t)
	table := outbox.Table{Schema: db.Schema, Name: "log"}
	if err := migrations.Migrate(context.Background(), db.Pool, migrations.Config{Table: table, Kind: outbox.KindLog}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	names, err := sqlname.For(table)
	if err != nil {
		t.Fatal(err)
	}
	l := &logDB{DB: db, names: names}
	var xmax uint64
	l.scan(t, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::numeric`, &xmax)
	if xmax >= 8*P {
		t.Skipf("the cluster's xids (%d) passed part 8: these tests place events in parts 0..7", xmax)
	}
	// Migrate attached 16 parts from the current one; once the cluster's
	// xids passed P (a test cluster that has run the suite a few times)
	// that is not part 0, which these tests write into.
	l.exec(t, `SELECT `+l.names.Log(sqlname.SuffixPartAdd)+`((n * $1::bigint)::text::xid8) FROM generate_series(0, 7) AS n`, int64(P))
	return l
}

func (l *logDB) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := l.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func (l *logDB) scan(t *testing.T, sql string, dst any, args ...any) {
	t.Helper()
	if err := l.Pool.QueryRow(context.Background(), sql, args...).Scan(dst); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// event writes an event with transaction id xid (into its part).
func (l *logDB) event(t *testing.T, xid uint64) {
	t.Helper()
	l.exec(t, `INSERT INTO `+l.names.Qualified+` (xid, id, event_type) VALUES ($1::text::xid8, gen_random_uuid(), 't')`,
		fmt.Sprint(xid))
}

// tick records tick id with a snapshot whose xmin (and xmax) is xmin.
func (l *logDB) tick(t *testing.T, id int64, xmin uint64) {
	t.Helper()
	l.exec(t, `INSERT INTO `+l.names.Log(sqlname.SuffixTicks)+` (tick_id, snapshot, last_seq, sysid)
		VALUES ($1, ($2 || ':' || $2 || ':')::pg_snapshot, 0, 0)`, id, fmt.Sprint(xmin))
}

// cursor puts group at tick (creating it).
func (l *logDB) cursor(t *testing.T, group string, tick int64) {
	t.Helper()
	l.exec(t, `INSERT INTO `+l.names.Log(sqlname.SuffixCursors)+` (grp, last_tick) VALUES ($1, $2)
		ON CONFLICT (grp) DO UPDATE SET last_tick = excluded.last_tick`, group, tick)
}

// rows counts the events of the part starting at lo.
func (l *logDB) rows(t *testing.T, lo uint64) int {
	t.Helper()
	var n int
	l.scan(t, `SELECT count(*) FROM `+pgx.Identifier{l.Schema, l.names.LogPart(lo)}.Sanitize(), &n)
	return n
}

// exists reports whether the part starting at lo exists.
func (l *logDB) exists(t *testing.T, lo uint64) bool {
	t.Helper()
	var ok bool
	l.scan(t, `SELECT to_regclass($1) IS NOT NULL`, &ok, pgx.Identifier{l.Schema, l.names.LogPart(lo)}.Sanitize())
	return ok
}

func (l *logDB) ticks(t *testing.T) []int64 {
	t.Helper()
	rows, err := l.Pool.Query(context.Background(), `SELECT tick_id FROM `+l.names.Log(sqlname.SuffixTicks)+` ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// service is a retention service of l's log whose current part starts
// at current (the real current part is 0: nothing would be dropped).
func (l *logDB) service(t *testing.T, current uint64, cfg Config) *Service {
	t.Helper()
	cfg.DB, cfg.Log = l.Pool, l.names.Table
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.currentLo = func(context.Context, DB) (uint64, error) { return current, nil }
	return s
}

func pass(t *testing.T, s *Service) Pass {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a progress bound, not a timing
	defer cancel()
	p, err := s.Pass(ctx)
	if err != nil {
		t.Fatalf("pass: %v", err)
	}
	return p
}

func TestPartKeptUntilEveryGroupPassedIt(t *testing.T) {
	l := newLog(t)
	l.event(t, 2*P+5)
	l.tick(t, 2, 2*P+10) // part 2 not passed (xmin inside it)
	l.tick(t, 3, 3*P)    // part 2 passed
	l.cursor(t, "fast", 3)
	l.cursor(t, "slow", 2)
	l.exec(t, `UPDATE `+l.names.Log(sqlname.SuffixCursors)+` SET stopped_reason = 'test' WHERE grp = 'slow'`)
	s := l.service(t, 0, Config{})

	p := pass(t, s)
	if p.Truncated != 0 || l.rows(t, 2*P) != 1 {
		t.Fatalf("a part the slow (stopped) group has not passed was truncated: %+v, rows %d", p, l.rows(t, 2*P))
	}
	if p.Waiting != 2 { // parts 0 and 1: passed, empty, not droppable (current part 0)
		t.Errorf("waiting = %d, want 2 (parts 0 and 1)", p.Waiting)
	}

	l.cursor(t, "slow", 3)
	p = pass(t, s)
	if p.Truncated != 1 || l.rows(t, 2*P) != 0 {
		t.Fatalf("the passed part was not truncated: %+v, rows %d", p, l.rows(t, 2*P))
	}
	if p.Dropped != 0 || !l.exists(t, 0) {
		t.Errorf("dropped %d parts at or above the current one", p.Dropped)
	}
}

func TestNoGroupRetiresNothing(t *testing.T) {
	l := newLog(t)
	l.event(t, P+1)
	l.tick(t, 2, 6*P)
	p := pass(t, l.service(t, 8*P, Config{}))
	if p != (Pass{}) || l.rows(t, P) != 1 || len(l.ticks(t)) != 2 {
		t.Fatalf("with no group: pass %+v, rows %d, ticks %v", p, l.rows(t, P), l.ticks(t))
	}
}

func TestBusyPartSkippedThenTruncated(t *testing.T) {
	l := newLog(t)
	l.event(t, P+1)
	l.tick(t, 2, 2*P)
	l.cursor(t, "g", 2)
	s := l.service(t, 0, Config{})

	ctx := context.Background()
	tx, err := l.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE `+pgx.Identifier{l.Schema, l.names.LogPart(P)}.Sanitize()+` IN ACCESS SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	p := pass(t, s) // returns while the lock is held: NOWAIT
	if p.Busy != 1 || p.Truncated != 0 || l.rows(t, P) != 1 {
		t.Fatalf("locked part: pass %+v, rows %d; want busy 1 and the row kept", p, l.rows(t, P))
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	p = pass(t, s)
	if p.Busy != 0 || p.Truncated != 1 || l.rows(t, P) != 0 {
		t.Fatalf("after the lock: pass %+v, rows %d; want it truncated", p, l.rows(t, P))
	}
}

func TestTicksBelowEveryCursorDeleted(t *testing.T) {
	l := newLog(t)
	for id := int64(2); id <= 6; id++ {
		l.tick(t, id, uint64(id))
	}
	l.cursor(t, "a", 4)
	l.cursor(t, "b", 6)
	p := pass(t, l.service(t, 0, Config{TickBatch: 1})) // one tick a statement
	if got := l.ticks(t); p.TicksDeleted != 3 || fmt.Sprint(got) != "[4 5 6]" {
		t.Fatalf("deleted %d, ticks left %v; want 3 deleted and [4 5 6] kept", p.TicksDeleted, got)
	}
	if p = pass(t, l.service(t, 0, Config{})); p.TicksDeleted != 0 {
		t.Fatalf("second pass deleted %d ticks", p.TicksDeleted)
	}
}

func TestOwnerDetachesAndDropsRetiredParts(t *testing.T) {
	l := newLog(t)
	l.event(t, P+1)
	l.event(t, 3*P+1)
	l.tick(t, 2, 3*P+10) // parts 0..2 passed, 3 not
	l.cursor(t, "g", 2)

	p := pass(t, l.service(t, 2*P, Config{})) // part 2 is the current one
	if p.Truncated != 1 || p.Dropped != 2 || p.Waiting != 1 || !p.Owner {
		t.Fatalf("pass %+v; want part 1 truncated, parts 0 and 1 dropped, part 2 (current) waiting", p)
	}
	if l.exists(t, 0) || l.exists(t, P) || !l.exists(t, 2*P) || l.rows(t, 3*P) != 1 {
		t.Fatalf("parts after the pass: 0 %v, 1 %v, 2 %v, rows of 3 %d", l.exists(t, 0), l.exists(t, P), l.exists(t, 2*P), l.rows(t, 3*P))
	}

	p = pass(t, l.service(t, 8*P, Config{})) // the ids moved on
	if p.Dropped != 1 || p.Waiting != 0 || l.exists(t, 2*P) || !l.exists(t, 3*P) {
		t.Fatalf("pass %+v; want part 2 dropped and part 3 (not passed) kept", p)
	}
	l.event(t, 4*P+1) // the log still takes events
}

func TestNotOwnerLeavesEmptyPartsWaiting(t *testing.T) {
	l := newLog(t)
	l.event(t, P+1)
	l.tick(t, 2, 2*P)
	l.cursor(t, "g", 2)
	role := l.NewRole(t, "relay")
	q := pgx.Identifier{role}.Sanitize()
	l.exec(t, `GRANT USAGE ON SCHEMA `+l.names.Schema+` TO `+q)
	l.exec(t, `GRANT EXECUTE ON FUNCTION `+l.names.Function(sqlname.SuffixPartTruncate)+`() TO `+q)
	l.exec(t, `GRANT EXECUTE ON FUNCTION `+l.names.Function(sqlname.SuffixTickTrim)+`(integer) TO `+q)
	s, err := New(Config{DB: l.RolePool(t, role, 2), Log: l.names.Table})
	if err != nil {
		t.Fatal(err)
	}
	s.currentLo = func(context.Context, DB) (uint64, error) { return 8 * P, nil }

	p := pass(t, s)
	if p.Truncated != 1 || p.Owner || p.Dropped != 0 || p.Waiting != 2 {
		t.Fatalf("pass %+v; want part 1 truncated and parts 0 and 1 waiting for the owner", p)
	}
	if !l.exists(t, 0) || !l.exists(t, P) || l.rows(t, P) != 0 {
		t.Fatal("a part was dropped without ownership, or not truncated")
	}
}

func TestRunPassesWhileHeld(t *testing.T) {
	l := newLog(t)
	l.event(t, P+1)
	l.tick(t, 2, 2*P)
	l.cursor(t, "g", 2)
	passes := make(chan Pass, 16)
	errs := make(chan error, 16)
	s := l.service(t, 0, Config{Interval: 10 * time.Millisecond, Held: func() bool { return true },
		OnPass: func(p Pass) { passes <- p }, OnError: func(err error) { errs <- err }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	bound := time.After(time.Minute) // a progress bound
	select {
	case p := <-passes:
		if p.Truncated != 1 {
			t.Errorf("first pass %+v; want part 1 truncated", p)
		}
	case err := <-errs:
		t.Fatalf("pass: %v", err)
	case <-bound:
		t.Fatal("no pass")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestRunSkipsWhenNotHeld(t *testing.T) {
	l := newLog(t)
	asked := make(chan struct{}, 16)
	s := l.service(t, 0, Config{Interval: time.Millisecond, Held: func() bool { asked <- struct{}{}; return false },
		OnPass: func(p Pass) { t.Errorf("a pass ran while not held: %+v", p) }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	for range 3 {
		<-asked
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestNewChecksConfig(t *testing.T) {
	var ce *outbox.ConfigError
	if _, err := New(Config{}); !errors.As(err, &ce) || ce.Field != "DB" {
		t.Errorf("no DB: %v", err)
	}
}

// TestMigrationDownAndUp applies 002's down part (the retention
// functions go) and its up part again, as rendered for psql.
func TestMigrationDownAndUp(t *testing.T) {
	l := newLog(t)
	files, err := migrations.Render(migrations.Config{Table: l.names.Table, Kind: outbox.KindLog})
	if err != nil {
		t.Fatal(err)
	}
	functions := func() int {
		var n int
		l.scan(t, `SELECT (to_regprocedure($1) IS NOT NULL)::int + (to_regprocedure($2) IS NOT NULL)::int`, &n,
			l.names.Function(sqlname.SuffixPartTruncate)+"()", l.names.Function(sqlname.SuffixTickTrim)+"(integer)")
		return n
	}
	for _, step := range []struct {
		file string
		want int
	}{{"002_log_retention.down.sql", 0}, {"002_log_retention.up.sql", 2}} {
		sql, err := fs.ReadFile(files, step.file)
		if err != nil {
			t.Fatal(err)
		}
		l.exec(t, string(sql))
		if got := functions(); got != step.want {
			t.Fatalf("after %s: %d retention functions, want %d", step.file, got, step.want)
		}
	}
}

// TestTickTrimWaitsForNoCursorWrite: while a transaction writes a cursor
// (here, creating a group at the oldest tick), the trim deletes nothing
// and does not wait; afterwards the new group's tick is kept.
func TestTickTrimWaitsForNoCursorWrite(t *testing.T) {
	l := newLog(t)
	l.tick(t, 2, 2)
	l.tick(t, 3, 3)
	l.cursor(t, "a", 3)
	ctx := context.Background()
	tx, err := l.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `INSERT INTO `+l.names.Log(sqlname.SuffixCursors)+` (grp, last_tick)
		SELECT 'old', tick_id FROM (SELECT tick_id FROM `+l.names.Log(sqlname.SuffixTicks)+`
			ORDER BY tick_id LIMIT 1 FOR KEY SHARE) t`); err != nil {
		t.Fatal(err)
	}
	s := l.service(t, 0, Config{})
	if p := pass(t, s); p.TicksDeleted != 0 {
		t.Fatalf("deleted %d ticks while a cursor was being written", p.TicksDeleted)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if p := pass(t, s); p.TicksDeleted != 0 || fmt.Sprint(l.ticks(t)) != "[1 2 3]" {
		t.Fatalf("deleted %d, ticks left %v; want the new group's tick 1 and newer kept", p.TicksDeleted, l.ticks(t))
	}
}
