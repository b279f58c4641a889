package admin

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Summary is a breakdown of the table by status, event type and error
// code, taken in one statement (one snapshot): what outboxctl status
// shows.
type Summary struct {
	// Counts are the rows per status, the due backlog and the age of the
	// oldest due row, as [Admin.Counts] reports them.
	Counts Counts `json:"counts"`
	// OldestPendingAge is how long ago the oldest PENDING row was created
	// (due or not), by the database clock; 0 when nothing is PENDING.
	// Unlike Counts.OldestDueAge it includes the time a row spent waiting
	// out retry backoffs.
	OldestPendingAge time.Duration `json:"oldest_pending_age_ns"`
	// ByType has one entry per event type present in the outbox (the
	// strays, Counts.Unmoved, left out), in type order; past [SentCountLimit] SENT rows (SentByType false), only the
	// types with rows in another status.
	ByType []TypeCounts `json:"by_type"`
	// SentByType reports that ByType's Sent counts are exact and that
	// ByType lists the types that have SENT rows only. It is false when
	// the history holds more than [SentCountLimit] SENT rows
	// (Counts.SentEstimated): then every TypeCounts.Sent is 0, meaning
	// not counted, and a type with SENT rows only is missing from ByType.
	SentByType bool `json:"sent_by_type"`
	// FailedByCode has one entry per last_error_code among FAILED rows,
	// the most frequent first (then in code order). A FAILED row without
	// a code counts under "".
	FailedByCode []CodeCount `json:"failed_by_code"`
}

// TypeCounts are the rows of one event type per status.
type TypeCounts struct {
	// Type is the event type.
	Type string `json:"type"`
	// Pending is the number of PENDING rows of the type.
	Pending int64 `json:"pending"`
	// Due is how many of Pending are due now. A type whose due rows
	// stay may be one no running dispatcher claims (see
	// dispatcher.Dispatcher.ClaimedTypes).
	Due int64 `json:"due"`
	// Processing is the number of PROCESSING rows of the type.
	Processing int64 `json:"processing"`
	// Sent is the number of SENT rows of the type, when the history holds
	// at most [SentCountLimit] SENT rows; 0, not counted, past it
	// (Summary.SentByType false), since counting them per type would read
	// every one.
	Sent int64 `json:"sent"`
	// Failed is the number of FAILED rows of the type.
	Failed int64 `json:"failed"`
}

// CodeCount is the number of FAILED rows with one last_error_code.
type CodeCount struct {
	// Code is the last error code ("" for a row without one).
	Code outbox.Code `json:"code"`
	// Count is the number of FAILED rows with that code.
	Count int64 `json:"count"`
}

// summaryGroup is one row of the summary statement: the rows of one
// (type, status, code) with their due count and oldest timestamps.
type summaryGroup struct {
	typ, status, code string
	count, due        int64
	oldestCreated     *time.Time // PENDING rows only
	oldestDue         *time.Time // due PENDING rows only
}

// Summary counts the rows per status, per event type and status, and the
// FAILED rows per error code, and measures the ages of the oldest PENDING
// and oldest due rows, all in one statement. Like [Admin.Counts] it reads
// PENDING and PROCESSING rows through their partial indexes of the outbox
// table and the dead letters whole, and counts them exactly, and counts
// the history's SENT rows (per type too) only up to [SentCountLimit]:
// past it Counts.Sent is an estimate and no type has SENT rows counted.
// The strays (Counts.Unmoved) are counted apart, not by type. Its cost
// follows the backlog and the dead letters, not the history. Like
// Counts it first reads whether the table has its order index.
func (a *Admin) Summary(ctx context.Context) (Summary, error) {
	sql, off, err := a.withKeyOrder(ctx, a.sql.summary, a.sql.summaryOff)
	if err != nil {
		return Summary{}, err
	}
	rows, err := a.db.Query(ctx, sql)
	if err != nil {
		return Summary{}, errtext.Wrap(err, "admin: summary %s", a.table)
	}
	s := Summary{Counts: Counts{KeyOrderOff: off}}
	var g summaryGroup
	var typ, status, code *string
	var count, due *int64
	var estimate int64
	targets := []any{&s.Counts.At, &estimate, &s.Counts.DueBlocked, &s.Counts.DueBlockedLimited, &s.Counts.Unmoved, &typ, &status, &code, &count, &due, &g.oldestCreated, &g.oldestDue}
	_, err = pgx.ForEachRow(rows, targets, func() error {
		if typ != nil { // nil: the empty table's one row
			g.typ, g.status, g.code, g.count, g.due = *typ, *status, *code, *count, *due
			s.add(g)
		}
		return nil
	})
	if err != nil {
		return Summary{}, errtext.Wrap(err, "admin: summary %s", a.table)
	}
	slices.SortFunc(s.FailedByCode, func(x, y CodeCount) int {
		return cmp.Or(cmp.Compare(y.Count, x.Count), cmp.Compare(x.Code, y.Code))
	})
	if estimate, err = a.historyRows(ctx, s.Counts, estimate); err != nil {
		return Summary{}, err
	}
	s.Counts.settleSent(estimate)
	s.SentByType = !s.Counts.SentEstimated
	if !s.SentByType {
		s.dropSentByType()
	}
	return s, nil
}

// dropSentByType forgets the SENT rows counted per type, which are only
// the first SentCountLimit+1 when Sent is estimated, and the types that
// had no other rows.
func (s *Summary) dropSentByType() {
	s.ByType = slices.DeleteFunc(s.ByType, func(c TypeCounts) bool {
		return c.Pending == 0 && c.Processing == 0 && c.Failed == 0
	})
	for i := range s.ByType {
		s.ByType[i].Sent = 0
	}
}

// add counts one group; the statement returns groups in type order.
func (s *Summary) add(g summaryGroup) {
	if n := len(s.ByType); n == 0 || s.ByType[n-1].Type != g.typ {
		s.ByType = append(s.ByType, TypeCounts{Type: g.typ})
	}
	byType, c := &s.ByType[len(s.ByType)-1], &s.Counts
	switch outbox.Status(g.status) {
	case outbox.StatusPending:
		byType.Pending += g.count
		byType.Due += g.due
		c.Pending += g.count
		c.Due += g.due
		s.OldestPendingAge = max(s.OldestPendingAge, since(c.At, g.oldestCreated))
		c.OldestDueAge = max(c.OldestDueAge, since(c.At, g.oldestDue))
	case outbox.StatusProcessing:
		byType.Processing += g.count
		c.Processing += g.count
	case outbox.StatusSent:
		byType.Sent += g.count
		c.Sent += g.count
	case outbox.StatusFailed:
		byType.Failed += g.count
		c.Failed += g.count
		s.addFailed(outbox.Code(g.code), g.count)
	}
}

// addFailed adds n FAILED rows with code to FailedByCode.
func (s *Summary) addFailed(code outbox.Code, n int64) {
	i := slices.IndexFunc(s.FailedByCode, func(c CodeCount) bool { return c.Code == code })
	if i < 0 {
		s.FailedByCode = append(s.FailedByCode, CodeCount{Code: code})
		i = len(s.FailedByCode) - 1
	}
	s.FailedByCode[i].Count += n
}

// since returns now - t, or 0 when t is nil or not before now.
func since(now time.Time, t *time.Time) time.Duration {
	if t == nil {
		return 0
	}
	return max(now.Sub(*t), 0)
}
