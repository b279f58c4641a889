package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/internal/lease"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// The transitions walcost measures, in the order the report shows them.
const (
	phaseInsert  = "insert"
	phaseClaim   = "claim"
	phaseRenew   = "heartbeat renewal"
	phaseHistory = "completion, history (pgoutbox: move to T_sent; minimal: UPDATE to SENT)"
	phaseDelete  = "completion, delete (pgoutbox: DeleteSent; minimal-delete: DELETE)"
	phaseRetry   = "retry (PENDING again in an hour)"
)

// walPhases are the phases in report order.
var walPhases = []string{phaseInsert, phaseClaim, phaseRenew, phaseHistory, phaseDelete, phaseRetry}

// The variants walcost measures.
const (
	variantKeyed   = "pgoutbox"
	variantUnkeyed = "pgoutbox, no aggregate id"
	variantMinimal = "minimal, same row"
	// variantLog is the relay's log (outbox.KindLog, issue 27): the
	// emitter's insert of the same event, and nothing after it (the
	// relay only reads).
	variantLog = "log, same event"
)

// walPhase is the WAL one transition of one variant wrote, summed over
// its events: the records of pg_walinspect between the start and the
// commit of each transaction that ran it whose first block belongs to a
// relation of the run's own database (so other sessions' WAL and commit
// records are not counted, as EXPLAIN's WAL figures do not count them).
type walPhase struct {
	Variant string `json:"variant"`
	Phase   string `json:"phase"`
	// Events is how many events went through the phase.
	Events int `json:"events"`
	// Records, Bytes: WAL records and their length, full-page images
	// included; FPIBytes is the images' part, FPIs the records with one.
	Records  int64 `json:"records"`
	Bytes    int64 `json:"bytes"`
	FPIBytes int64 `json:"fpi_bytes"`
	FPIs     int64 `json:"fpis"`
	// IndexEntries counts B-tree leaf inserts (INSERT_LEAF, INSERT_POST):
	// one per index entry written.
	IndexEntries int64 `json:"index_entries"`
	// Updates and HOTUpdates are n_tup_upd and n_tup_hot_upd of the
	// phase's transactions (pg_stat_xact_user_tables, every table).
	Updates    int64 `json:"updates"`
	HOTUpdates int64 `json:"hot_updates"`
	// Written is the records per relation (table or index name).
	Written map[string]int64 `json:"written"`
}

// add sums o into p.
func (p *walPhase) add(o walPhase) {
	p.Records += o.Records
	p.Bytes += o.Bytes
	p.FPIBytes += o.FPIBytes
	p.FPIs += o.FPIs
	p.IndexEntries += o.IndexEntries
	p.Updates += o.Updates
	p.HOTUpdates += o.HOTUpdates
	if p.Written == nil {
		p.Written = map[string]int64{}
	}
	for k, v := range o.Written {
		p.Written[k] += v
	}
}

// perEvent is v per event of the phase (0 without events).
func (p walPhase) perEvent(v int64) float64 {
	if p.Events == 0 {
		return 0
	}
	return float64(v) / float64(p.Events)
}

// walcostRowDDL is the minimal outbox with pgoutbox's row: the outbox
// table's columns and defaults, the minimal outbox's two indexes (primary
// key, due PENDING rows), none of pgoutbox's constraints.
const walcostRowDDL = `CREATE TABLE minimal_row (LIKE outbox_events INCLUDING DEFAULTS INCLUDING IDENTITY);
ALTER TABLE minimal_row ADD PRIMARY KEY (id);
CREATE INDEX minimal_row_due ON minimal_row (next_attempt_at, seq) WHERE status = 'PENDING';`

// walcostRecordsSQL sums the WAL records of the current database's
// relations in [$1, $2), per resource manager, record type and relation.
const walcostRecordsSQL = `WITH w AS (
	SELECT resource_manager AS rm, record_type AS rt, record_length AS len, fpi_length AS fpi,
		regexp_match(block_ref, 'rel \d+/(\d+)/(\d+)') AS m
	FROM pg_get_wal_records_info($1::text::pg_lsn, $2::text::pg_lsn))
SELECT w.rm, w.rt, coalesce(c.relname, w.m[2]), count(*), sum(w.len)::bigint, sum(w.fpi)::bigint, count(*) FILTER (WHERE w.fpi > 0)
FROM w LEFT JOIN pg_class c ON c.relfilenode = w.m[2]::oid
WHERE w.m[1]::oid = (SELECT oid FROM pg_database WHERE datname = current_database())
GROUP BY 1, 2, 3`

// runWALCost measures the WAL each transition writes per event (see
// walPhase), on a fresh database migrated to the current schema version
// (migrations.Migrate, what `outboxctl migrate` runs): for pgoutbox's own
// statements (the emitter's insert, internal/lease's claim, renewal and
// completions) on a row with an aggregate id and on one without, and for
// the minimal outbox's statements on a table with pgoutbox's row and the
// minimal outbox's indexes. Each variant: N single-event transactions,
// then claims of Batch, each renewed once and then completed: batch i
// with history (i mod 3 = 0), deleted (1) or retried (2).
func runWALCost(ctx context.Context, o Options) (Result, error) {
	db, err := openMigrated(ctx, o.URL, 2)
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	conn, err := pgx.ConnectConfig(ctx, db.connConfig())
	if err != nil {
		return Result{}, err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_walinspect;`+walcostRowDDL); err != nil {
		return Result{}, fmt.Errorf("walcost needs pg_walinspect (PostgreSQL 15 or later, superuser): %w", err)
	}
	if err := migrations.Migrate(ctx, conn, migrations.Config{Table: benchLog, Kind: outbox.KindLog}); err != nil {
		return Result{}, err
	}
	if o.FillFactor > 0 {
		if _, err := conn.Exec(ctx, fmt.Sprintf(`ALTER TABLE outbox_events SET (fillfactor = %d)`, o.FillFactor)); err != nil {
			return Result{}, err
		}
	}
	start := time.Now()
	m := &walMeter{conn: conn, batch: o.Batch}
	var phases []walPhase
	for _, v := range []walVariant{pgoutboxVariant(variantKeyed, true), pgoutboxVariant(variantUnkeyed, false), minimalVariant(), logVariant()} {
		ps, err := m.run(ctx, v, o.N)
		if err != nil {
			return Result{}, fmt.Errorf("%s: %w", v.name, err)
		}
		phases = append(phases, ps...)
	}
	res := throughput("wal", o.N, time.Since(start))
	res.WAL = phases
	res.Params = map[string]any{"batch": o.Batch, "schema_version": migrations.Latest(), "fillfactor": o.FillFactor}
	res.Note = "events_per_s is not a figure of this case: see wal"
	err = verifyWALCost(ctx, db, phases)
	res.Verified = err == nil
	return res, err
}

// verifyWALCost checks where the events ended: each retried one PENDING,
// each completed with history SENT (pgoutbox: in the outbox table or its
// history table), each deleted gone; pgoutbox's two variants share the
// outbox table.
func verifyWALCost(ctx context.Context, db *benchDB, phases []walPhase) error {
	events := func(variants []string, phase string) int {
		n := 0
		for _, p := range phases {
			if p.Phase == phase && slices.Contains(variants, p.Variant) {
				n += p.Events
			}
		}
		return n
	}
	ours, minimal := []string{variantKeyed, variantUnkeyed}, []string{variantMinimal}
	checks := []struct {
		want int
		sql  string
	}{
		{events(ours, phaseRetry), `SELECT count(*) FROM outbox_events WHERE status = 'PENDING'`},
		{events(ours, phaseHistory), sentSQL},
		{events(ours, phaseRetry) + events(ours, phaseHistory), `SELECT (SELECT count(*) FROM outbox_events) + (SELECT count(*) FROM outbox_events_sent)`},
		{events(minimal, phaseRetry), `SELECT count(*) FROM minimal_row WHERE status = 'PENDING'`},
		{events(minimal, phaseHistory), `SELECT count(*) FROM minimal_row WHERE status = 'SENT'`},
		{events(minimal, phaseRetry) + events(minimal, phaseHistory), `SELECT count(*) FROM minimal_row`},
		{events([]string{variantLog}, phaseInsert), logCountSQL},
	}
	for _, c := range checks {
		if err := db.expect(ctx, c.want, c.sql); err != nil {
			return err
		}
	}
	return nil
}

// walVariant is one table and its statements, each run inside the
// transaction walMeter gives it.
type walVariant struct {
	name string
	// insert writes the i-th event alone.
	insert func(ctx context.Context, tx pgx.Tx, i int) error
	// claim leases up to limit due rows under a fresh token; nil for a
	// variant that only inserts (the log), whose run measures the
	// insert phase alone.
	claim func(ctx context.Context, tx pgx.Tx, limit int) ([]lease.Ref, error)
	// renew, sent, deleted and retry change the claimed rows: each
	// returns an error unless every one of them changed.
	renew, sent, deleted, retry func(ctx context.Context, tx pgx.Tx, refs []lease.Ref) error
}

// walMeter runs a variant's phases, a transaction each, on one
// connection and measures each.
type walMeter struct {
	conn  *pgx.Conn
	batch int
}

// run writes n events, then claims, renews and completes them all, and
// returns the sum of each phase.
func (m *walMeter) run(ctx context.Context, v walVariant, n int) ([]walPhase, error) {
	sums := map[string]*walPhase{}
	for _, p := range walPhases {
		sums[p] = &walPhase{Variant: v.name, Phase: p}
	}
	for i := 0; i < n; i += m.batch {
		if err := m.inserts(ctx, sums[phaseInsert], v, i, min(n, i+m.batch)); err != nil {
			return nil, err
		}
	}
	if v.claim == nil {
		return []walPhase{*sums[phaseInsert]}, nil
	}
	for b, left := 0, n; left > 0; b++ {
		var refs []lease.Ref
		err := m.measure(ctx, sums[phaseClaim], 0, func(tx pgx.Tx) (err error) {
			refs, err = v.claim(ctx, tx, min(m.batch, left))
			return err
		})
		if err != nil {
			return nil, err
		}
		if len(refs) == 0 {
			return nil, fmt.Errorf("claimed nothing with %d of %d events left", left, n)
		}
		sums[phaseClaim].Events += len(refs)
		left -= len(refs)
		if err := m.measure(ctx, sums[phaseRenew], len(refs), func(tx pgx.Tx) error { return v.renew(ctx, tx, refs) }); err != nil {
			return nil, err
		}
		phase, end := phaseHistory, v.sent
		switch b % 3 {
		case 1:
			phase, end = phaseDelete, v.deleted
		case 2:
			phase, end = phaseRetry, v.retry
		}
		if err := m.measure(ctx, sums[phase], len(refs), func(tx pgx.Tx) error { return end(ctx, tx, refs) }); err != nil {
			return nil, err
		}
	}
	out := make([]walPhase, 0, len(walPhases))
	for _, p := range walPhases {
		out = append(out, *sums[p])
	}
	return out, nil
}

// xactUpdatesSQL is n_tup_upd and n_tup_hot_upd of every table so far in
// the transaction. In PostgreSQL 15 and later these include the backend's
// counts of earlier transactions not yet flushed to the statistics (at
// most a second old, flushed only between transactions), so measure
// takes the difference between the transaction's start and its end.
const xactUpdatesSQL = `SELECT pg_current_wal_insert_lsn()::text, coalesce(sum(n_tup_upd), 0)::bigint, coalesce(sum(n_tup_hot_upd), 0)::bigint
FROM pg_stat_xact_user_tables`

// measure runs op in a transaction and adds what it wrote, and events
// events, to sum.
func (m *walMeter) measure(ctx context.Context, sum *walPhase, events int, op func(pgx.Tx) error) error {
	var from, to, ignored string
	var got walPhase
	var upd0, hot0 int64
	err := pgx.BeginFunc(ctx, m.conn, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, xactUpdatesSQL).Scan(&from, &upd0, &hot0); err != nil {
			return err
		}
		if err := op(tx); err != nil {
			return err
		}
		return tx.QueryRow(ctx, xactUpdatesSQL).Scan(&ignored, &got.Updates, &got.HOTUpdates)
	})
	if err != nil {
		return err
	}
	got.Updates -= upd0
	got.HOTUpdates -= hot0
	// The commit flushed every record of the transaction: the flush
	// position is past them, and pg_walinspect reads only flushed WAL.
	if err := m.conn.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn()::text`).Scan(&to); err != nil {
		return err
	}
	if err := m.records(ctx, from, to, &got); err != nil {
		return err
	}
	sum.add(got)
	sum.Events += events
	return nil
}

// inserts writes events from to to-1, a transaction each, and adds what
// they wrote to sum.
func (m *walMeter) inserts(ctx context.Context, sum *walPhase, v walVariant, from, to int) error {
	var start, end string
	if err := m.conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&start); err != nil {
		return err
	}
	for i := from; i < to; i++ {
		if err := pgx.BeginFunc(ctx, m.conn, func(tx pgx.Tx) error { return v.insert(ctx, tx, i) }); err != nil {
			return err
		}
	}
	if err := m.conn.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn()::text`).Scan(&end); err != nil {
		return err
	}
	var got walPhase
	if err := m.records(ctx, start, end, &got); err != nil {
		return err
	}
	sum.add(got)
	sum.Events += to - from
	return nil
}

// records reads the WAL of the database's relations in [from, to) into p.
func (m *walMeter) records(ctx context.Context, from, to string, p *walPhase) error {
	p.Written = map[string]int64{}
	rows, err := m.conn.Query(ctx, walcostRecordsSQL, from, to)
	if err != nil {
		return err
	}
	var rm, rt, rel string
	var count, length, fpi, fpis int64
	_, err = pgx.ForEachRow(rows, []any{&rm, &rt, &rel, &count, &length, &fpi, &fpis}, func() error {
		p.Records += count
		p.Bytes += length
		p.FPIBytes += fpi
		p.FPIs += fpis
		p.Written[rel] += count
		if rm == "Btree" && (rt == "INSERT_LEAF" || rt == "INSERT_POST") {
			p.IndexEntries += count
		}
		return nil
	})
	return err
}

// walcostPayload is the event's payload: 270 bytes of JSON.
var walcostPayload = []byte(`{"order_id":"0000000000","customer":"customer-000000","lines":[{"sku":"sku-00000","qty":1,"price":"10.00"},` +
	`{"sku":"sku-00001","qty":2,"price":"20.00"}],"total":"50.00","currency":"EUR","note":"a bench event of about 270 bytes of JSON payload, padded"}`)

// walcostHeaders are the event's headers: one W3C traceparent.
var walcostHeaders = map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}

// walcostAggregate is the i-th event's aggregate id ("" without keys).
func walcostAggregate(i int, keyed bool) string {
	if !keyed {
		return ""
	}
	return fmt.Sprintf("order-%d", i)
}

// pgoutboxVariant runs pgoutbox's own statements: the emitter's Emit and
// internal/lease's Claim, Renew and Complete, as the dispatcher sends them.
func pgoutboxVariant(name string, keyed bool) walVariant {
	em, emErr := emitter.New(emitter.Config{DisableNotify: true})
	store, storeErr := lease.New(outbox.Table{})
	must := func() error {
		if emErr != nil {
			return emErr
		}
		return storeErr
	}
	return walVariant{
		name: name,
		insert: func(ctx context.Context, tx pgx.Tx, i int) error {
			if err := must(); err != nil {
				return err
			}
			_, err := em.Emit(ctx, tx, outbox.Event{Type: "order.created", AggregateType: "order", AggregateID: walcostAggregate(i, keyed),
				ContentType: "application/json", Payload: walcostPayload, Headers: walcostHeaders})
			return err
		},
		claim: func(ctx context.Context, tx pgx.Tx, limit int) ([]lease.Ref, error) {
			if err := must(); err != nil {
				return nil, err
			}
			b, err := store.Claim(ctx, tx, lease.ClaimParams{Owner: "bench", Limit: limit, Lease: time.Minute, Start: limit})
			return b.Refs(), err
		},
		renew: func(ctx context.Context, tx pgx.Tx, refs []lease.Ref) error {
			r, err := store.Renew(ctx, tx, refs, time.Minute)
			return allDone(err, len(r.Done), len(refs), "renewed")
		},
		sent: func(ctx context.Context, tx pgx.Tx, refs []lease.Ref) error {
			r, err := store.Complete(ctx, tx, lease.CompleteParams{Sent: refs})
			return allDone(err, len(r.Sent), len(refs), "sent")
		},
		deleted: func(ctx context.Context, tx pgx.Tx, refs []lease.Ref) error {
			r, err := store.Complete(ctx, tx, lease.CompleteParams{Sent: refs, DeleteSent: true})
			return allDone(err, len(r.Sent), len(refs), "deleted")
		},
		retry: func(ctx context.Context, tx pgx.Tx, refs []lease.Ref) error {
			failed := make([]lease.Failure, len(refs))
			for i, r := range refs {
				failed[i] = lease.Failure{Ref: r, Code: outbox.CodeHandlerError, Message: "bench: handler failed", Delay: time.Hour}
			}
			r, err := store.Complete(ctx, tx, lease.CompleteParams{Failed: failed})
			return allDone(err, len(r.Retried), len(refs), "retried")
		},
	}
}

// The minimal outbox's statements on minimal_row (walcostRowDDL): those
// of minimal.go, with the retry a hand-written outbox needs.
const (
	walcostMinimalInsert = `INSERT INTO minimal_row (id, event_type, aggregate_type, aggregate_id, content_type, payload, headers)
VALUES ($1, $2, $3, NULLIF($4, ''), $5, $6, $7)`
	walcostMinimalClaim = `WITH due AS MATERIALIZED (
	SELECT id FROM minimal_row
	WHERE status = 'PENDING' AND next_attempt_at <= now()
	ORDER BY next_attempt_at, seq
	LIMIT $1
	FOR UPDATE SKIP LOCKED
)
UPDATE minimal_row AS o
SET status = 'PROCESSING', lock_token = $2, lease_until = now() + interval '1 minute'
WHERE o.id = ANY (ARRAY(SELECT id FROM due))
RETURNING o.id`
	walcostMinimalFence = ` WHERE id = ANY ($1::uuid[]) AND lock_token = $2 AND status = 'PROCESSING' AND lease_until > now()`
	walcostMinimalRenew = `UPDATE minimal_row SET lease_until = now() + interval '1 minute'` + walcostMinimalFence
	walcostMinimalSent  = `UPDATE minimal_row SET status = 'SENT', lock_token = NULL, lease_until = NULL` + walcostMinimalFence
	walcostMinimalDel   = `DELETE FROM minimal_row` + walcostMinimalFence
	walcostMinimalRetry = `UPDATE minimal_row SET status = 'PENDING', attempts = attempts + 1, next_attempt_at = now() + interval '1 hour',
	last_error_code = 'handler_error', last_error = 'bench: handler failed', lock_token = NULL, lease_until = NULL` + walcostMinimalFence
)

// minimalVariant runs the minimal outbox's statements on minimal_row, with
// the same event as pgoutboxVariant's keyed one.
func minimalVariant() walVariant {
	exec := func(sql, what string) func(context.Context, pgx.Tx, []lease.Ref) error {
		return func(ctx context.Context, tx pgx.Tx, refs []lease.Ref) error {
			ids := make([][16]byte, len(refs))
			for i, r := range refs {
				ids[i] = r.ID
			}
			tag, err := tx.Exec(ctx, sql, ids, [16]byte(refs[0].Token))
			return allDone(err, int(tag.RowsAffected()), len(refs), what)
		}
	}
	return walVariant{
		name: variantMinimal,
		insert: func(ctx context.Context, tx pgx.Tx, i int) error {
			id, err := uuid.NewV7()
			if err != nil {
				return err
			}
			_, err = tx.Exec(ctx, walcostMinimalInsert, [16]byte(id), "order.created", "order", walcostAggregate(i, true), "application/json",
				walcostPayload, walcostHeaders)
			return err
		},
		claim: func(ctx context.Context, tx pgx.Tx, limit int) ([]lease.Ref, error) {
			token := uuid.New()
			rows, err := tx.Query(ctx, walcostMinimalClaim, limit, [16]byte(token))
			if err != nil {
				return nil, err
			}
			var refs []lease.Ref
			var id [16]byte
			_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
				refs = append(refs, lease.Ref{ID: id, Token: token})
				return nil
			})
			return refs, err
		},
		renew:   exec(walcostMinimalRenew, "renewed"),
		sent:    exec(walcostMinimalSent, "sent"),
		deleted: exec(walcostMinimalDel, "deleted"),
		retry:   exec(walcostMinimalRetry, "retried"),
	}
}

// allDone is err, or an error when done of want rows changed.
func allDone(err error, done, want int, what string) error {
	if err == nil && done != want {
		err = fmt.Errorf("%s %d of %d rows", what, done, want)
	}
	return err
}

// logVariant runs the emitter's insert into the log (benchLog) of the
// same event as pgoutboxVariant's keyed one; the log has no other phase.
func logVariant() walVariant {
	em, err := emitter.New(emitter.Config{Table: benchLog, Kind: outbox.KindLog})
	return walVariant{
		name: variantLog,
		insert: func(ctx context.Context, tx pgx.Tx, i int) error {
			if err != nil {
				return err
			}
			_, err := em.Emit(ctx, tx, outbox.Event{Type: "order.created", AggregateType: "order", AggregateID: walcostAggregate(i, true),
				ContentType: "application/json", Payload: walcostPayload, Headers: walcostHeaders})
			return err
		},
	}
}
