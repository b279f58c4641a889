package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/pgvalue"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Counts is a snapshot of the outbox by status, taken in one statement:
// the outbox table (PENDING and PROCESSING rows), its dead letters
// (FAILED rows) and its SENT history.
type Counts struct {
	// Pending is the exact number of PENDING rows.
	Pending int64 `json:"pending"`
	// Processing is the exact number of PROCESSING rows.
	Processing int64 `json:"processing"`
	// Sent is the number of rows in the SENT history: exact up to
	// [SentCountLimit], an estimate past it (SentEstimated). SENT rows
	// still in the outbox table count in Unmoved, not here.
	Sent int64 `json:"sent"`
	// SentEstimated reports that Sent is an estimate: the history holds
	// more than [SentCountLimit] rows, and Sent is the planner's estimate
	// of its rows (pg_class, the sum over its partitions as of their last
	// ANALYZE or VACUUM, each scaled to its current size; when a
	// partition was never analyzed nor vacuumed, an estimate from a
	// sample of the history's pages), and at least SentCountLimit+1. It
	// drifts between autovacuum runs; the other counts are exact (or,
	// Unmoved, bounded).
	SentEstimated bool `json:"sent_estimated"`
	// Failed is the exact number of dead letters (FAILED rows). FAILED
	// rows still in the outbox table count in Unmoved, not here.
	Failed int64 `json:"failed"`
	// Unmoved is the number of rows still in the outbox table with
	// status SENT or FAILED (strays: left by the upgrade to schema
	// version 10, or written by a dispatcher of version 9 still running),
	// which the retention pass moves to the history and the dead letters
	// (purge.Sweep); 0 in steady state. Counted up to [SentCountLimit]+1
	// through the stray index: past SentCountLimit it is a lower bound.
	Unmoved int64 `json:"unmoved"`
	// Due is how many PENDING rows are due now (next_attempt_at <= now()).
	Due int64 `json:"due"`
	// DueBlocked is how many of Due wait behind a FAILED, unskipped event
	// (a dead letter) of their order key (coalesce(partition_key,
	// aggregate_id)) with a lower seq: under per-key ordering with head
	// policy BlockKey they are not delivered until that event is replayed
	// or skipped (see [Admin.BlockedKeys]); dispatchers without ordering
	// deliver them, and dispatchers with OrderScope ScopeKeyAndType hold
	// only those of the FAILED event's type (DueBlocked counts the key's
	// rows of every type: an upper bound for them).
	DueBlocked int64 `json:"due_blocked"`
	// DueBlockedLimited reports that DueBlocked is a lower bound: more
	// than [BlockedCountLimit] FAILED, unskipped events have an order
	// key, or more than [SentCountLimit] due rows wait behind them, and
	// only the rows behind BlockedCountLimit of those events, up to
	// SentCountLimit, were counted, so that Counts stays cheap on an
	// outbox that keeps many dead letters ([Admin.BlockedKeys] walks them
	// all).
	DueBlockedLimited bool `json:"due_blocked_limited,omitempty"`
	// KeyOrderOff reports that the table has no valid order index
	// (schema version 12 keeps it only with migrations.Config.KeyOrder,
	// or once a dispatcher with Ordering PerKey built it), so blocked
	// events were not counted: DueBlocked is 0 and nothing was read to
	// count it. Without the index no dispatcher of version 12 orders per
	// key; while one builds it, or a dispatcher of version 11 still runs
	// with PerKey after the upgrade dropped it, events may be blocked
	// uncounted.
	KeyOrderOff bool `json:"key_order_off,omitempty"`
	// OldestDueAge is how long the oldest due PENDING row has been due, by
	// the database clock; 0 when nothing is due. A growing value means the
	// dispatchers are not keeping up (or not running).
	OldestDueAge time.Duration `json:"oldest_due_age_ns"`
	// At is the database's now() when the counts were taken.
	At time.Time `json:"at"`
}

// Total returns the number of rows in every status, the strays
// (Unmoved) included once.
func (c Counts) Total() int64 { return c.Pending + c.Processing + c.Sent + c.Failed + c.Unmoved }

// Counts counts the rows per status and measures the age of the oldest due
// PENDING row, in one statement. PENDING and PROCESSING rows are counted
// exactly in the outbox table, each through its status's partial index
// (due, held), and FAILED rows exactly in the dead letters, so those
// counts cost in proportion to the backlog and the dead letters; SENT
// rows are counted one by one in the history up to [SentCountLimit] and
// estimated past it (see Counts.SentEstimated), and the strays
// (Counts.Unmoved) counted up to the same limit. However long the history
// is, Counts reads no more than about SentCountLimit of its rows. A
// catalog query first finds whether the table has its order index (see
// Counts.KeyOrderOff).
func (a *Admin) Counts(ctx context.Context) (Counts, error) {
	var c Counts
	var ageMicros, estimate int64
	sql, off, err := a.withKeyOrder(ctx, a.sql.counts, a.sql.countsOff)
	if err != nil {
		return Counts{}, err
	}
	err = a.db.QueryRow(ctx, sql).Scan(&c.Pending, &c.Processing, &c.Sent, &c.Failed, &c.Due, &ageMicros,
		&c.At, &estimate, &c.DueBlocked, &c.DueBlockedLimited, &c.Unmoved)
	if err != nil {
		return Counts{}, errtext.Wrap(err, "admin: counts %s", a.table)
	}
	c.OldestDueAge = time.Duration(ageMicros) * time.Microsecond
	c.KeyOrderOff = off
	if estimate, err = a.historyRows(ctx, c, estimate); err != nil {
		return Counts{}, err
	}
	c.settleSent(estimate)
	return c, nil
}

// historyRows returns rows, the history's row estimate from pg_class,
// or, when that is unknown (-1: a partition never analyzed nor vacuumed,
// as after a bulk load) and c counted past SentCountLimit SENT rows, an
// estimate from a sample of about sampledPages of the history's pages
// (TABLESAMPLE SYSTEM): their rows per page times the pages of all its
// partitions. -1 when the sample found no row (settleSent then keeps the
// count).
func (a *Admin) historyRows(ctx context.Context, c Counts, rows int64) (int64, error) {
	if rows >= 0 || c.Sent <= SentCountLimit {
		return rows, nil
	}
	var pages float64
	err := a.db.QueryRow(ctx, `SELECT coalesce(sum(pg_relation_size(inhrelid)), 0) / current_setting('block_size')::float8
		FROM pg_inherits WHERE inhparent = $1::regclass`, a.sql.sent).Scan(&pages)
	if err == nil {
		// Rows per sampled page (pages with a visible row), times the
		// pages: the number of pages SYSTEM picks varies, their density
		// much less.
		percent := min(100, 100*sampledPages/max(pages, 1))
		err = a.db.QueryRow(ctx, `SELECT coalesce((count(*) / nullif(count(DISTINCT (tableoid, (ctid::text::point)[0])), 0) * $2::float8)::bigint, -1)
			FROM `+a.sql.sent+` TABLESAMPLE SYSTEM ($1)`, percent, pages).Scan(&rows)
	}
	if err != nil {
		return 0, errtext.Wrap(err, "admin: estimate the rows of %s", a.sql.sent)
	}
	return rows, nil
}

// sampledPages is about how many pages historyRows reads.
const sampledPages = 100

// settleSent replaces c.Sent, a count stopped at SentCountLimit+1, by an
// estimate when the count reached that limit: rows is the planner's
// estimate of the history's rows.
func (c *Counts) settleSent(rows int64) {
	if c.Sent <= SentCountLimit {
		return
	}
	c.SentEstimated = true
	c.Sent = max(rows, c.Sent)
}

// List page sizes.
const (
	// DefaultListLimit is the page size when ListParams.Limit is 0.
	DefaultListLimit = 100
	// MaxListLimit is the largest page size List accepts.
	MaxListLimit = 1000
)

// Cursor marks the end of a page: the seq of its last row. The zero value
// starts at the first row. It prints as a decimal number (empty when zero)
// and [ParseCursor] reads that back, so it can travel through a CLI flag or
// a URL.
type Cursor struct{ seq int64 }

// IsZero reports whether c is the start (or, as Page.Next, the end).
func (c Cursor) IsZero() bool { return c.seq == 0 }

// String returns the cursor as text: the decimal seq, or "" when zero.
func (c Cursor) String() string {
	if c.seq == 0 {
		return ""
	}
	return strconv.FormatInt(c.seq, 10)
}

// MarshalText implements encoding.TextMarshaler with String's form.
func (c Cursor) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// ParseCursor reads a cursor printed by Cursor.String. "" is the start.
func ParseCursor(s string) (Cursor, error) {
	if s == "" {
		return Cursor{}, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return Cursor{}, inputErr("After", "is not a cursor (a non-negative number)")
	}
	return Cursor{seq: n}, nil
}

// ListParams selects a page of rows.
type ListParams struct {
	// Status keeps only rows in this status. Empty means every status.
	Status outbox.Status
	// Type keeps only rows of this event type. Empty means every type.
	// It must be valid UTF-8 without NUL.
	Type string
	// AggregateID keeps only rows about this entity (aggregate_id, of any
	// aggregate type). Empty means every row. It must be valid UTF-8
	// without NUL.
	AggregateID string
	// Code keeps only rows whose last_error_code is this: FAILED rows
	// that died of it, and rows that failed an attempt with it and were
	// retried. Empty means every row. It must be valid UTF-8 without NUL.
	Code outbox.Code
	// Key keeps only rows of this order key: their partition key, else
	// their aggregate id (coalesce(partition_key, aggregate_id), what
	// per-key ordering orders by). Empty means every row. It must be
	// valid UTF-8 without NUL.
	Key string
	// CreatedAfter keeps only rows created (created_at) at or after this
	// instant, in the years 1 to 9999. Zero means no lower bound.
	CreatedAfter time.Time
	// CreatedBefore keeps only rows created before this instant, in the
	// years 1 to 9999. Zero means no upper bound.
	CreatedBefore time.Time
	// After continues from a previous page's Next. The zero value starts
	// at the beginning.
	After Cursor
	// Limit is the page size, 1 to [MaxListLimit]. Defaults to
	// [DefaultListLimit].
	Limit int
}

// Page is one page of List.
type Page struct {
	// Events are the page's rows in seq order (oldest insert first).
	Events []Record `json:"events"`
	// Next continues after this page; it is zero when there are no more
	// rows right now. A page that read the history up to [ListScanLimit]
	// rows (filtered by Code, Key or creation time, without AggregateID)
	// has a Next even when it holds fewer than its Limit rows.
	Next Cursor `json:"next"`
}

// List returns one page of rows matching p, in seq order, by keyset: each
// page starts after the previous page's last seq, so pages never repeat or
// skip a row that stays where it is, however many rows are inserted or
// deleted while an operator pages (no OFFSET). A row keeps its seq when
// it moves between the outbox table, the dead letters and the history. A
// row whose transaction commits after a later page was read, with a seq
// below that page's end, is not shown to that walk; nor is a row that
// moved (a replay) past the walk's cursor; start again to see it.
//
// Each status is read where it lives (schema version 10): SENT rows in
// the history, through its seq, type or aggregate index (one scan per
// partition, merged), FAILED rows in the dead letters, through their
// seq, type, aggregate or code index; a page of either costs its rows,
// the first or the millionth, except SENT rows filtered by Code, Key,
// CreatedAfter or CreatedBefore and not by AggregateID (the history has
// no index for those): such a page reads at most [ListScanLimit] history
// rows (in seq order, or the type index's entries among them), and may
// end short of Limit (even empty)
// with a Next to go on from; with CreatedAfter it reads only the
// history's partitions that reach past it. Key filters the dead letters
// through their order index, and the outbox table's rows through its
// order index when it has one (migrations.Config.KeyOrder). PENDING and
// PROCESSING rows are in the outbox table, which since schema version 11
// has no index in seq order: a page of them reads every row of the
// status (the due index for PENDING, the held index for PROCESSING) and
// sorts those after the cursor, so it costs the backlog, never the
// history or the dead letters; on a backlog of 1,000,000 PENDING rows a
// page reads them all, as [Admin.PendingByType] does (some 34,000 pages,
// seconds from a cold cache): during a large backlog page the history or
// the dead letters, or look at counts first. Without a status, a page merges the tables by seq: the first
// rows of each after the cursor, the outbox table's as above (its strays,
// rows with status SENT or FAILED not moved yet, through the stray index
// in seq order), so it costs a page of each table plus the backlog.
func (a *Admin) List(ctx context.Context, p ListParams) (Page, error) {
	if err := checkFilter(p); err != nil {
		return Page{}, err
	}
	limit, err := checkLimit(p.Limit, DefaultListLimit, MaxListLimit)
	if err != nil {
		return Page{}, err
	}
	upTo, err := a.listBound(ctx, p)
	if err != nil {
		return Page{}, errtext.Wrap(err, "admin: list %s", a.table)
	}
	stmt, args := a.listSQL(p, limit+1, upTo)
	rows, err := a.db.Query(ctx, stmt, args...)
	if err != nil {
		return Page{}, errtext.Wrap(err, "admin: list %s", a.table)
	}
	var r Record
	events := make([]Record, 0, limit)
	_, err = pgx.ForEachRow(rows, r.targets(), func() error {
		events = append(events, r)
		return nil
	})
	if err != nil {
		return Page{}, errtext.Wrap(err, "admin: list %s", a.table)
	}
	page := Page{Events: events}
	switch {
	case len(events) > limit:
		page.Events = events[:limit]
		page.Next = Cursor{seq: events[limit-1].Seq}
	case upTo > 0:
		page.Next = Cursor{seq: upTo} // the history was read up to upTo only
	}
	return page, nil
}

// checkFilter checks the filters of p (not After nor Limit).
func checkFilter(p ListParams) error {
	if p.Status != "" && !p.Status.Valid() {
		return inputErr("Status", "is %q, must be PENDING, PROCESSING, SENT, FAILED or empty", p.Status)
	}
	err := cmp.Or(checkText("Type", p.Type), checkText("AggregateID", p.AggregateID), checkText("Code", string(p.Code)),
		checkText("Key", p.Key), checkTime("CreatedAfter", p.CreatedAfter), checkTime("CreatedBefore", p.CreatedBefore))
	if err == nil && !p.CreatedAfter.IsZero() && !p.CreatedBefore.IsZero() && !p.CreatedAfter.Before(p.CreatedBefore) {
		err = inputErr("CreatedBefore", "is not after CreatedAfter: no row can match")
	}
	return err
}

// ListScanLimit is the most SENT rows a page reads in the history when
// it is filtered by Code, Key, CreatedAfter or CreatedBefore and not by
// AggregateID (the history has no index for those filters; with Type
// the type index is read within that many rows of the history): past
// them the page ends where the read ended, with the rows found so far
// (perhaps none) and a Next to go on from.
const ListScanLimit = 10_000

// listBound returns, for a page of p that reads the history by filters
// it has no index for, the seq of the ListScanLimit-th history row after
// the cursor (one index-only read of the history's seq index): the page
// reads no row past it. 0 when p needs no bound or the history has fewer
// rows after the cursor.
func (a *Admin) listBound(ctx context.Context, p ListParams) (int64, error) {
	return a.historyBound(ctx, p, ListScanLimit)
}

// listBoundSQL is listBound's statement, "" when p needs no bound.
func (a *Admin) listBoundSQL(p ListParams) (string, []any) {
	return a.historyBoundSQL(p, ListScanLimit)
}

// historyBound returns the seq of the n-th history row after p's cursor
// when p reads the history by filters it has no index for, 0 otherwise or
// when the history has fewer rows.
func (a *Admin) historyBound(ctx context.Context, p ListParams, n int) (int64, error) {
	stmt, args := a.historyBoundSQL(p, n)
	if stmt == "" {
		return 0, nil
	}
	var upTo int64
	err := a.db.QueryRow(ctx, stmt, args...).Scan(&upTo)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return upTo, err
}

// historyBoundSQL is historyBound's statement, "" when p needs no bound.
// With CreatedAfter it reads only the history's partitions that may hold
// rows created since (sent_at >= created_at).
func (a *Admin) historyBoundSQL(p ListParams, n int) (string, []any) {
	unindexed := p.Code != "" || p.Key != "" || !p.CreatedAfter.IsZero() || !p.CreatedBefore.IsZero()
	if !unindexed || p.AggregateID != "" || (p.Status != "" && p.Status != outbox.StatusSent) {
		return "", nil
	}
	var w where
	w.conds = append(w.conds, "seq > "+w.arg(p.After.seq))
	if !p.CreatedAfter.IsZero() {
		w.conds = append(w.conds, "sent_at >= "+w.arg(p.CreatedAfter))
	}
	return fmt.Sprintf(`SELECT seq FROM %s WHERE %s ORDER BY seq OFFSET %d LIMIT 1`, a.sql.sent, &w, n-1), w.args
}

// listSQL is the statement and arguments of one page of at most limit
// rows matching p (validated), with seq at most upTo unless it is 0: one
// leg per place where rows of p's status live (listLegs), merged by seq.
func (a *Admin) listSQL(p ListParams, limit int, upTo int64) (string, []any) {
	legs, lim, args := a.listLegs(p, recordColumns, limit, upTo, 0)
	if len(legs) == 1 {
		return legs[0], args
	}
	return fmt.Sprintf("SELECT * FROM ((%s)) AS r ORDER BY seq LIMIT %s", strings.Join(legs, ")\n\tUNION ALL ("), lim), args
}

// listLegs returns one statement per place where rows of p's status
// live, each selecting cols of the rows matching p (validated) after its
// cursor, with seq at most upTo unless it is 0 (and, in the history, at
// most historyUpTo unless it is 0), in seq order, at most limit of them;
// and the placeholder of limit, and the arguments. Only the filters given
// become conditions, and the statuses are literals, so that a generic
// plan can use the partial indexes.
func (a *Admin) listLegs(p ListParams, cols string, limit int, upTo, historyUpTo int64) (legs []string, lim string, args []any) {
	var w where
	w.conds = append(w.conds, "seq > "+w.arg(p.After.seq))
	if upTo > 0 {
		w.conds = append(w.conds, "seq <= "+w.arg(upTo))
	}
	history := ""
	if historyUpTo > 0 {
		history = "seq <= " + w.arg(historyUpTo) + " AND "
	}
	w.eq("event_type", p.Type)
	w.eq("aggregate_id", p.AggregateID)
	w.eq("last_error_code", string(p.Code))
	w.eq(orderKey, p.Key)
	if !p.CreatedAfter.IsZero() {
		after := w.arg(p.CreatedAfter)
		w.conds = append(w.conds, "created_at >= "+after)
		// A row is sent after it was created: the history's partitions
		// that end before CreatedAfter are not read.
		history += "sent_at >= " + after + " AND "
	}
	if !p.CreatedBefore.IsZero() {
		w.conds = append(w.conds, "created_at < "+w.arg(p.CreatedBefore))
	}
	lim = w.arg(limit)
	leg := func(table, cond string) string {
		return fmt.Sprintf("SELECT %s FROM %s WHERE %s%s ORDER BY seq LIMIT %s", cols, table, cond, &w, lim)
	}
	pending := leg(a.sql.t, "status = 'PENDING' AND ")
	processing := leg(a.sql.t, "status = 'PROCESSING' AND ")
	stray := func(status string) string {
		return leg(a.sql.t, "status IN ('SENT', 'FAILED') AND status = '"+status+"' AND ")
	}
	switch p.Status {
	case outbox.StatusPending:
		legs = []string{pending}
	case outbox.StatusProcessing:
		legs = []string{processing}
	case outbox.StatusSent:
		legs = []string{leg(a.sql.sent, history), stray("SENT")}
	case outbox.StatusFailed:
		legs = []string{leg(a.sql.dead, ""), stray("FAILED")}
	default:
		legs = []string{leg(a.sql.sent, history), leg(a.sql.dead, ""), pending, processing,
			leg(a.sql.t, "status IN ('SENT', 'FAILED') AND ")}
	}
	return legs, lim, w.args
}

// AttemptLogEntry is one failed, retried or recovered attempt from a row's
// attempt log.
type AttemptLogEntry struct {
	// Attempt is the attempt's number (1 for the first).
	Attempt int `json:"attempt"`
	// Outcome is "retry", "failed" or "recovered".
	Outcome string `json:"outcome"`
	// Code is the attempt's error code.
	Code outbox.Code `json:"code"`
	// Message is the attempt's error text (bounded).
	Message string `json:"message"`
	// Owner is the worker that made the attempt.
	Owner string `json:"owner"`
	// Started is when the attempt's claim was made.
	Started time.Time `json:"started"`
	// Ended is when its outcome was recorded.
	Ended time.Time `json:"ended"`
}

// Detail is one row in full: its Record, payload, headers and attempt log.
type Detail struct {
	Record
	// Payload is the event body as stored.
	Payload []byte `json:"payload"`
	// Headers are the event's string headers.
	Headers map[string]string `json:"headers"`
	// AttemptLog holds the latest unsuccessful attempts, oldest first (at
	// most 10).
	AttemptLog []AttemptLogEntry `json:"attempt_log"`
}

// Inspect returns the row with the given id in full, from the outbox
// table (its primary key), else the dead letters (theirs), else the SENT
// history (its id index, one probe per partition), in one statement. A
// missing id gives an error that errors.Is [ErrNotFound].
func (a *Admin) Inspect(ctx context.Context, id uuid.UUID) (Detail, error) {
	var d Detail
	var headers, log []byte
	err := a.db.QueryRow(ctx, a.sql.inspect, pgvalue.UUID(id)).Scan(append(d.targets(), &d.Payload, &headers, &log)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return Detail{}, &notFoundError{id: id.String(), table: a.table.String()}
	}
	if err != nil {
		return Detail{}, errtext.Wrap(err, "admin: inspect %s in %s", id, a.table)
	}
	// Decoding errors name the column only: json's messages may quote
	// the bytes they could not read.
	if json.Unmarshal(headers, &d.Headers) != nil {
		return Detail{}, fmt.Errorf("pgoutbox: admin: inspect %s: headers are not an object of strings", id)
	}
	if json.Unmarshal(log, &d.AttemptLog) != nil {
		return Detail{}, fmt.Errorf("pgoutbox: admin: inspect %s: attempt_log is not an array of entries", id)
	}
	return d, nil
}

// MaxCount is the most rows Count counts, and the most history rows it
// reads for a filter the history has no index for.
const MaxCount = 100_000

// CountResult is how many rows a filter matches.
type CountResult struct {
	// N is the number of rows counted, at most [MaxCount].
	N int64 `json:"n"`
	// Capped reports that counting stopped before the end: N is a lower
	// bound (MaxCount rows matched, or MaxCount history rows were read
	// for a filter the history has no index for).
	Capped bool `json:"capped"`
}

// Count returns how many rows match p's filters (p.After and p.Limit are
// ignored), counting at most [MaxCount] so that it stays bounded on a
// long history.
func (a *Admin) Count(ctx context.Context, p ListParams) (CountResult, error) {
	if err := checkFilter(p); err != nil {
		return CountResult{}, err
	}
	p.After = Cursor{}
	upTo, err := a.historyBound(ctx, p, MaxCount)
	if err != nil {
		return CountResult{}, errtext.Wrap(err, "admin: count %s", a.table)
	}
	stmt, args := a.countSQL(p, upTo)
	var n int64
	if err := a.db.QueryRow(ctx, stmt, args...).Scan(&n); err != nil {
		return CountResult{}, errtext.Wrap(err, "admin: count %s", a.table)
	}
	return CountResult{N: min(n, MaxCount), Capped: n > MaxCount || upTo > 0}, nil
}

// countSQL is Count's statement and arguments for p (validated, from the
// start), with the history read up to seq upTo unless it is 0: List's
// legs, each stopping at MaxCount+1 rows in seq order, counted up to
// MaxCount+1 in all.
func (a *Admin) countSQL(p ListParams, upTo int64) (string, []any) {
	legs, lim, args := a.listLegs(p, "seq", MaxCount+1, 0, upTo)
	return fmt.Sprintf("SELECT count(*) FROM (SELECT 1 FROM ((%s)) AS r LIMIT %s) AS c", strings.Join(legs, ")\n\tUNION ALL ("), lim), args
}
