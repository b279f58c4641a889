package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/pguuid"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Counts is a snapshot of the table by status, taken in one statement.
type Counts struct {
	// Pending is the exact number of PENDING rows.
	Pending int64 `json:"pending"`
	// Processing is the exact number of PROCESSING rows.
	Processing int64 `json:"processing"`
	// Sent is the number of SENT rows: exact up to [SentCountLimit], an
	// estimate past it (SentEstimated).
	Sent int64 `json:"sent"`
	// SentEstimated reports that Sent is an estimate: more than
	// [SentCountLimit] rows are SENT, and Sent is the planner's estimate
	// of the table's rows (pg_class, as of the last ANALYZE or VACUUM,
	// scaled to the table's current size; for a table never analyzed nor
	// vacuumed, the planner's guess from its size on disk) less the exact
	// counts of the other statuses, and at least SentCountLimit+1. It drifts between
	// autovacuum runs; the other counts are always exact.
	SentEstimated bool `json:"sent_estimated"`
	// Failed is the exact number of FAILED rows.
	Failed int64 `json:"failed"`
	// Due is how many PENDING rows are due now (next_attempt_at <= now()).
	Due int64 `json:"due"`
	// DueBlocked is how many of Due wait behind a FAILED, unskipped event
	// of their order key (coalesce(partition_key, aggregate_id)) with a
	// lower seq: under per-key ordering with head policy BlockKey they
	// are not delivered until that event is replayed or skipped (see
	// [Admin.BlockedKeys]); dispatchers without ordering deliver them,
	// and dispatchers with OrderScope ScopeKeyAndType hold only those of
	// the FAILED event's type (DueBlocked counts the key's rows of every
	// type: an upper bound for them).
	DueBlocked int64 `json:"due_blocked"`
	// DueBlockedLimited reports that DueBlocked is a lower bound: more
	// than [BlockedCountLimit] FAILED, unskipped events have an order
	// key, or more than [SentCountLimit] due rows wait behind them, and
	// only the rows behind BlockedCountLimit of those events, up to
	// SentCountLimit, were counted, so that Counts stays cheap on a table
	// that keeps many FAILED rows ([Admin.BlockedKeys] walks them all).
	DueBlockedLimited bool `json:"due_blocked_limited,omitempty"`
	// OldestDueAge is how long the oldest due PENDING row has been due, by
	// the database clock; 0 when nothing is due. A growing value means the
	// dispatchers are not keeping up (or not running).
	OldestDueAge time.Duration `json:"oldest_due_age_ns"`
	// At is the database's now() when the counts were taken.
	At time.Time `json:"at"`
}

// Total returns the number of rows in every status.
func (c Counts) Total() int64 { return c.Pending + c.Processing + c.Sent + c.Failed }

// Counts counts the rows per status and measures the age of the oldest due
// PENDING row, in one statement. PENDING, PROCESSING and FAILED rows are
// counted exactly, each through its status's partial index (due, lease,
// failed), so those counts cost in proportion to the rows in the status;
// SENT rows are counted one by one up to [SentCountLimit] and estimated
// past it (see Counts.SentEstimated). However many SENT rows the table
// keeps, Counts reads no more than about SentCountLimit of them.
func (a *Admin) Counts(ctx context.Context) (Counts, error) {
	var c Counts
	var ageMicros, estimate int64
	err := a.db.QueryRow(ctx, a.sql.counts).Scan(&c.Pending, &c.Processing, &c.Sent, &c.Failed, &c.Due, &ageMicros,
		&c.At, &estimate, &c.DueBlocked, &c.DueBlockedLimited)
	if err != nil {
		return Counts{}, errtext.Wrap(err, "admin: counts %s", a.table)
	}
	c.OldestDueAge = time.Duration(ageMicros) * time.Microsecond
	if estimate, err = a.tableRows(ctx, c, estimate); err != nil {
		return Counts{}, err
	}
	c.settleSent(estimate)
	return c, nil
}

// tableRows returns rows, the table's row estimate from pg_class, or,
// when that is unknown (-1: never analyzed nor vacuumed, as after a bulk
// load) and c counted past SentCountLimit SENT rows, an estimate from a
// sample of about sampledPages of the table's pages (TABLESAMPLE SYSTEM):
// their rows per page times the table's pages. -1 when the sample found
// no row (settleSent then keeps the count).
func (a *Admin) tableRows(ctx context.Context, c Counts, rows int64) (int64, error) {
	if rows >= 0 || c.Sent <= SentCountLimit {
		return rows, nil
	}
	var pages float64
	err := a.db.QueryRow(ctx, "SELECT pg_relation_size($1::regclass) / current_setting('block_size')::float8",
		a.qualified).Scan(&pages)
	if err == nil {
		// Rows per sampled page (pages with a visible row), times the
		// pages: the number of pages SYSTEM picks varies, their density
		// much less.
		percent := min(100, 100*sampledPages/max(pages, 1))
		err = a.db.QueryRow(ctx, `SELECT coalesce((count(*) / nullif(count(DISTINCT (ctid::text::point)[0]), 0) * $2::float8)::bigint, -1)
			FROM `+a.qualified+` TABLESAMPLE SYSTEM ($1)`, percent, pages).Scan(&rows)
	}
	if err != nil {
		return 0, errtext.Wrap(err, "admin: estimate the rows of %s", a.table)
	}
	return rows, nil
}

// sampledPages is about how many pages tableRows reads.
const sampledPages = 100

// settleSent replaces c.Sent, a count stopped at SentCountLimit+1, by an
// estimate when the count reached that limit: rows is the planner's
// estimate of the table's rows.
func (c *Counts) settleSent(rows int64) {
	if c.Sent <= SentCountLimit {
		return
	}
	c.SentEstimated = true
	c.Sent = max(rows-c.Pending-c.Processing-c.Failed, c.Sent)
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
	// rows right now.
	Next Cursor `json:"next"`
}

// List returns one page of rows matching p, in seq order, by keyset: each
// page starts after the previous page's last seq, so pages never repeat or
// skip a row that stays in the table, however many rows are inserted or
// deleted while an operator pages (no OFFSET). A row whose transaction
// commits after a later page was read, with a seq below that page's end,
// is not shown to that walk; start again to see it.
//
// Every page, the first or the millionth, is read from an index (schema
// version 5, and 8): without a filter, or with Status SENT, the seq index
// from the cursor on; with Type, AggregateID or Code, that column's index;
// without a Status, the PROCESSING rows (which those indexes leave out)
// from the lease index besides;
// with Status FAILED and Code, the failed index from the cursor on; with
// Status PENDING, PROCESSING or FAILED otherwise, that status's partial
// index, whose rows after the cursor are all read and sorted: such a page
// costs in proportion to the rows in the status (not to the SENT rows),
// so during a backlog a page of PENDING rows reads the whole backlog.
func (a *Admin) List(ctx context.Context, p ListParams) (Page, error) {
	if p.Status != "" && !p.Status.Valid() {
		return Page{}, inputErr("Status", "is %q, must be PENDING, PROCESSING, SENT, FAILED or empty", p.Status)
	}
	if err := cmp.Or(checkText("Type", p.Type), checkText("AggregateID", p.AggregateID), checkText("Code", string(p.Code))); err != nil {
		return Page{}, err
	}
	limit, err := checkLimit(p.Limit, DefaultListLimit, MaxListLimit)
	if err != nil {
		return Page{}, err
	}
	stmt, args := a.listSQL(p, limit+1)
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
	if len(events) > limit {
		page.Events = events[:limit]
		page.Next = Cursor{seq: events[limit-1].Seq}
	}
	return page, nil
}

// listSQL is the statement and arguments of one page of at most limit
// rows matching p (validated). Only the filters given become conditions;
// the status is a literal, so that a generic plan can use its partial
// index. "seq + 0" keeps the planner off the seq index for the statuses
// with an index of their own: walking seq in order and filtering for
// PENDING reads past every SENT row before the first PENDING one. FAILED
// rows of one code are ordered by plain seq: the failed index
// (last_error_code, seq) holds them in that order, so a page reads its
// rows only instead of sorting every FAILED row with the code.
//
// The list indexes (seq, type, aggregate, code; schema version 8) leave
// out PROCESSING rows, so that a claim does not write them. A status
// filter other than PROCESSING implies their predicate; without a status
// filter the page is read in two parts, the rows that are not PROCESSING
// from those indexes and the PROCESSING ones from the lease index, and
// merged in seq order.
func (a *Admin) listSQL(p ListParams, limit int) (string, []any) {
	var w where
	w.conds = append(w.conds, "seq > "+w.arg(p.After.seq))
	order := "seq"
	if p.Status != "" {
		w.conds = append(w.conds, "status = "+quoteLiteral(string(p.Status)))
		if p.Status != outbox.StatusSent && (p.Status != outbox.StatusFailed || p.Code == "") {
			order = "seq + 0"
		}
	}
	w.eq("event_type", p.Type)
	w.eq("aggregate_id", p.AggregateID)
	w.eq("last_error_code", string(p.Code))
	lim := w.arg(limit)
	if p.Status != "" {
		return fmt.Sprintf("SELECT %s FROM %s WHERE %s ORDER BY %s LIMIT %s", recordColumns, a.qualified, &w, order, lim), w.args
	}
	return fmt.Sprintf(`SELECT * FROM (
	(SELECT %[1]s FROM %[2]s WHERE status <> 'PROCESSING' AND %[3]s ORDER BY seq LIMIT %[4]s)
	UNION ALL
	(SELECT %[1]s FROM %[2]s WHERE status = 'PROCESSING' AND %[3]s ORDER BY seq + 0 LIMIT %[4]s)
) AS r ORDER BY seq LIMIT %[4]s`, recordColumns, a.qualified, &w, lim), w.args
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

// Inspect returns the row with the given id in full. A missing id gives an
// error that errors.Is [ErrNotFound].
func (a *Admin) Inspect(ctx context.Context, id uuid.UUID) (Detail, error) {
	var d Detail
	var headers, log []byte
	err := a.db.QueryRow(ctx, a.sql.inspect, pguuid.Of(id)).Scan(append(d.targets(), &d.Payload, &headers, &log)...)
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
