package lease

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// Failure is the outcome of a failed attempt on one held row.
type Failure struct {
	Ref
	// Code is the stable reason, stored in last_error_code.
	Code outbox.Code
	// Message is the error text, stored bounded (2048 characters in
	// last_error, 512 in the attempt log). It must not contain payloads.
	Message string
	// Final makes the row FAILED, moved into the dead letters; otherwise
	// it returns to PENDING, due at the database's now() + Delay.
	Final bool
	// Delay is the backoff before the retry, or the snooze; ignored when
	// Final.
	Delay time.Duration
	// Snooze returns the row to PENDING, due at the database's now() +
	// Delay, without spending an attempt: attempts, last_error_code,
	// last_error and attempt_log stay as they are and snoozes grows by
	// one. Code and Message are not stored. Ignored when Final.
	Snooze bool
}

// CompleteParams are the outcomes to record.
type CompleteParams struct {
	// Sent are the rows whose attempt succeeded.
	Sent []Ref
	// Failed are the rows whose attempt failed.
	Failed []Failure
	// DeleteSent deletes succeeded rows instead of moving them into the
	// SENT history.
	DeleteSent bool
	// StatementTimeout, when positive, bounds the statements on the server
	// as well (the lesser of it and the session's statement_timeout), so
	// that a write the caller gave up on (its context ended, and the
	// cancel request did not reach the server) cannot go on beside the
	// caller's retry of it.
	StatementTimeout time.Duration
}

// Retried is a row returned to PENDING for a later attempt: a retry, or a
// snooze (Failure.Snooze).
type Retried struct {
	ID uuid.UUID
	// Attempts is the number of ended attempts, this one included (unless
	// it snoozed).
	Attempts int
	// NextAttemptAt is when the row becomes due again (database clock).
	NextAttemptAt time.Time
}

// Dead is a row that became FAILED.
type Dead struct {
	ID uuid.UUID
	// Attempts is the number of ended attempts, this one included.
	Attempts int
}

// CompleteResult says what happened to each row of a Complete call.
type CompleteResult struct {
	// Sent are the rows now SENT in the history (or deleted).
	Sent []uuid.UUID
	// Retried are the rows now PENDING again.
	Retried []Retried
	// Failed are the rows now FAILED, in the dead letters.
	Failed []Dead
	// Lost are the rows the caller no longer held: their lease expired or
	// their token no longer matched. They were not changed.
	Lost []uuid.UUID
}

// Complete records a batch of outcomes in one round trip: one statement for
// all successes and one for all failures, each fenced by id, token and an
// unexpired lease. A success moves its row into the SENT history (or
// deletes it, DeleteSent) and a final failure into the dead letters, in
// the same statements (see the package doc, "Tables"). Rows that fail the
// fence are reported in Lost.
func (s *Store) Complete(ctx context.Context, db DB, p CompleteParams) (CompleteResult, error) {
	batch := &pgx.Batch{}
	if p.StatementTimeout > 0 {
		batch.Queue(boundTimeout, p.StatementTimeout.Milliseconds())
	}
	sentSQL := s.sql.sent
	if p.DeleteSent {
		sentSQL = s.sql.deleteSent
	}
	sentGroups := groupByToken(p.Sent)
	for _, g := range sentGroups {
		batch.Queue(sentSQL, g.ids, g.token)
	}
	failedGroups := groupByToken(failureRefs(p.Failed))
	for _, g := range failedGroups {
		batch.Queue(s.sql.failed, failureArgs(g, p.Failed)...)
	}
	if len(sentGroups)+len(failedGroups) == 0 {
		return CompleteResult{}, nil
	}
	res, err := s.runComplete(ctx, db, batch, len(sentGroups), p.StatementTimeout > 0)
	if err != nil {
		return CompleteResult{}, fmt.Errorf("pgoutbox: complete: %w", err)
	}
	res.Lost = lost(p, res)
	return res, nil
}

// boundTimeout sets statement_timeout for the rest of the transaction (the
// implicit one of a batch) to $1 milliseconds, or to the session's value
// when that is lower and not 0.
const boundTimeout = `SELECT set_config('statement_timeout', (SELECT CASE WHEN t = 0 THEN $1::bigint ELSE least(t, $1::bigint) END
	FROM (SELECT (extract(epoch FROM current_setting('statement_timeout')::interval) * 1000)::bigint AS t) AS s)::text, true)`

// runComplete sends the batch: first, when bounded, the statement that
// sets the timeout, then the statements for successes (each returning
// ids), then those for failures.
func (s *Store) runComplete(ctx context.Context, db DB, batch *pgx.Batch, sentStatements int, bounded bool) (res CompleteResult, err error) {
	if bounded {
		sentStatements++
	}
	err = queryBatch(ctx, db, batch, func(i int, rows pgx.Rows) error {
		switch {
		case bounded && i == 0:
			rows.Close()
			return rows.Err()
		case i < sentStatements:
			// One target for every row: a CollectRows function scanning
			// into its own variable allocated it, and its argument slice,
			// for every row written.
			var id [16]byte // directly, where uuid.UUID would go through text
			_, err := pgx.ForEachRow(rows, []any{&id}, func() error {
				res.Sent = append(res.Sent, id)
				return nil
			})
			return err
		default:
			return collectOutcomes(rows, &res)
		}
	})
	return res, err
}

func failureRefs(fs []Failure) []Ref {
	refs := make([]Ref, len(fs))
	for i, f := range fs {
		refs[i] = f.Ref
	}
	return refs
}

// failureArgs are the parameters of the failed statement for one group of
// fs.
func failureArgs(g tokenGroup, fs []Failure) []any {
	n := len(g.ids)
	codes := make([]string, n)
	messages := make([]string, n)
	finals := make([]bool, n)
	delays := make([]int64, n)
	snoozes := make([]bool, n)
	for j, i := range g.index {
		f := fs[i]
		codes[j], messages[j] = string(f.Code), CleanMessage(f.Message)
		finals[j], delays[j], snoozes[j] = f.Final, micros(f.Delay), f.Snooze && !f.Final
	}
	return []any{g.ids, g.token, codes, messages, finals, delays, snoozes}
}

// maxMessageBytes bounds the error text sent to the database.
const maxMessageBytes = 2048

// CleanMessage makes an error text storable as text: valid UTF-8, no NUL,
// at most maxMessageBytes bytes (cut on a rune boundary). It is the text
// Complete stores as last_error, and the dispatcher logs the same.
func CleanMessage(m string) string {
	m = strings.ReplaceAll(strings.ToValidUTF8(m, "\uFFFD"), "\x00", "")
	if len(m) <= maxMessageBytes {
		return m
	}
	cut := maxMessageBytes
	for cut > 0 && !utf8.RuneStart(m[cut]) {
		cut--
	}
	return m[:cut]
}

// lost lists the requested rows that no statement touched.
func lost(p CompleteParams, res CompleteResult) []uuid.UUID {
	if len(res.Sent)+len(res.Retried)+len(res.Failed) == len(p.Sent)+len(p.Failed) {
		return nil // each statement returns only rows it was given, once
	}
	done := make(map[uuid.UUID]struct{}, len(p.Sent)+len(p.Failed))
	for _, id := range res.Sent {
		done[id] = struct{}{}
	}
	for _, r := range res.Retried {
		done[r.ID] = struct{}{}
	}
	for _, d := range res.Failed {
		done[d.ID] = struct{}{}
	}
	var out []uuid.UUID
	for _, r := range p.Sent {
		if _, ok := done[r.ID]; !ok {
			out = append(out, r.ID)
		}
	}
	for _, f := range p.Failed {
		if _, ok := done[f.ID]; !ok {
			out = append(out, f.ID)
		}
	}
	return out
}

// Unknown is an outcome whose write may or may not have been recorded
// (see Outcomes).
type Unknown struct {
	ID uuid.UUID
	// Why says what the row showed, for the caller's report: it starts in
	// lower case and names no payload.
	Why string
}

// Outcomes reads back, after a completion whose reply was lost (a timeout,
// a broken connection) and whose retry found its rows no longer held,
// what each row of p shows of the outcome p asks for, and sorts them as
// the decision table of the package doc says ("Lost replies"): an outcome
// that this claim recorded goes to Sent, Retried or Failed as if the
// reply had arrived; one that the row proves was never recorded (the
// lease was lost first) to Lost; one the row can no longer tell about to
// unknown. p must ask for the same outcomes as the write that may have
// taken effect, with the same delays. One statement per claim token and
// per MaxRefsPerStatement rows, in one round trip.
func (s *Store) Outcomes(ctx context.Context, db DB, p CompleteParams) (res CompleteResult, unknown []Unknown, err error) {
	asked := askedOutcomes(p)
	if len(asked) == 0 {
		return CompleteResult{}, nil, nil
	}
	refs := make([]Ref, 0, len(asked))
	for _, a := range asked {
		refs = append(refs, a.ref)
	}
	batch := &pgx.Batch{}
	for _, g := range groupByToken(refs) {
		batch.Queue(s.sql.outcomes, g.ids, g.token)
	}
	err = queryBatch(ctx, db, batch, func(_ int, rows pgx.Rows) error {
		var t trace
		var id [16]byte
		_, err := pgx.ForEachRow(rows, []any{&id, &t.state, &t.attempts, &t.next, &t.loggedAttempt, &t.loggedAt}, func() error {
			t.id = id
			unknown = settle(&res, unknown, asked[t.id], t)
			return nil
		})
		return err
	})
	if err != nil {
		return CompleteResult{}, nil, fmt.Errorf("pgoutbox: read outcomes: %w", err)
	}
	return res, unknown, nil
}

// asked is one outcome a completion asked for: a success, or a failure.
type asked struct {
	ref     Ref
	failure *Failure // nil for a success
}

func askedOutcomes(p CompleteParams) map[uuid.UUID]asked {
	out := make(map[uuid.UUID]asked, len(p.Sent)+len(p.Failed))
	for _, r := range p.Sent {
		out[r.ID] = asked{ref: r}
	}
	for i := range p.Failed {
		out[p.Failed[i].ID] = asked{ref: p.Failed[i].Ref, failure: &p.Failed[i]}
	}
	return out
}

// trace is what the outcomes statement read of one row: its state under
// the token (see the statement), its attempts and due time, and the
// attempt number and end of the latest attempt-log entry written under
// the token, if any.
type trace struct {
	id            uuid.UUID
	state         string
	attempts      int
	next          time.Time
	loggedAttempt *int
	loggedAt      *time.Time
}

// settle sorts one row's trace into res or unknown, by the decision table
// of the package doc ("Lost replies").
func settle(res *CompleteResult, unknown []Unknown, a asked, t trace) []Unknown {
	f := a.failure
	switch t.state {
	case "HELD", "RECOVERED":
		res.Lost = append(res.Lost, t.id)
	case "RECORDED":
		addRecorded(res, f, t)
	case "LOGGED":
		if f == nil || f.Snooze {
			return append(unknown, Unknown{ID: t.id, Why: "the row shows an attempt-log entry of this claim that this outcome does not write"})
		}
		addRecorded(res, f, t)
	case "GONE":
		return append(unknown, Unknown{ID: t.id, Why: "the row is gone"})
	default: // NO_TRACE
		if f == nil {
			// A SENT row keeps its outcome token for good (or the
			// row is gone): this success was not recorded.
			res.Lost = append(res.Lost, t.id)
			return unknown
		}
		return append(unknown, Unknown{ID: t.id, Why: "a later outcome of the event left no trace of this one"})
	}
	return unknown
}

// addRecorded adds the outcome f (a success when nil) that this claim
// recorded to res, with the attempts and due time it wrote: those of its
// attempt-log entry when the row has one (a retry's time is the entry's
// end plus the delay), else the row's.
func addRecorded(res *CompleteResult, f *Failure, t trace) {
	attempts, next := t.attempts, t.next
	if f != nil && !f.Snooze && t.loggedAttempt != nil && t.loggedAt != nil {
		attempts = *t.loggedAttempt
		if f != nil && !f.Final {
			next = t.loggedAt.Add(time.Duration(micros(f.Delay)) * time.Microsecond)
		}
	}
	switch {
	case f == nil:
		res.Sent = append(res.Sent, t.id)
	case f.Final:
		res.Failed = append(res.Failed, Dead{ID: t.id, Attempts: attempts})
	default:
		res.Retried = append(res.Retried, Retried{ID: t.id, Attempts: attempts, NextAttemptAt: next})
	}
}

// collectOutcomes sorts rows of (id, status, attempts, next_attempt_at)
// into res by status.
func collectOutcomes(rows pgx.Rows, res *CompleteResult) error {
	var r Retried
	var id [16]byte
	var status outbox.Status
	_, err := pgx.ForEachRow(rows, []any{&id, &status, &r.Attempts, &r.NextAttemptAt}, func() error {
		r.ID = id
		switch status {
		case outbox.StatusSent:
			res.Sent = append(res.Sent, r.ID)
		case outbox.StatusFailed:
			res.Failed = append(res.Failed, Dead{ID: r.ID, Attempts: r.Attempts})
		case outbox.StatusPending:
			res.Retried = append(res.Retried, r)
		default:
			res.Lost = append(res.Lost, r.ID)
		}
		return nil
	})
	return err
}
