package lease

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgoutbox/pgoutbox/internal/pgvalue"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Ref names one held row: its id and the token it was claimed with.
type Ref struct {
	ID    uuid.UUID
	Token uuid.UUID
}

// ClaimParams are the inputs of Claim.
type ClaimParams struct {
	// Owner names the claiming worker; stored in lock_owner and the
	// attempt log. Required.
	Owner string
	// Limit is the most rows to claim; at least 1.
	Limit int
	// Lease is how long the claim holds before it expires unless renewed;
	// at least 1ms.
	Lease time.Duration
	// Start is how many of the claimed rows, first in claim order, to mark
	// started (started_at): those the caller starts at once, suspects
	// excepted (see Batch.Suspect). The others must be marked with
	// [Store.Start] before their attempt starts, or they are not charged
	// a recovery if the lease expires. 0 to Limit.
	Start int
	// Types, when not nil, restricts the claim to events of these types
	// (an empty slice claims nothing): a filter on the claim's walk of
	// the due index, whose plan does not depend on the number of types;
	// the claim walks past the due rows of other types before its own
	// (see the package doc, "Claim"). nil claims due events of every
	// type. Each type must be valid PostgreSQL text (see pgvalue);
	// duplicates are allowed.
	Types []string
	// Ordered claims per order key (coalesce(partition_key,
	// aggregate_id)) only a run of the key's blockers that starts at its
	// head: due PENDING rows, in seq order, with no row of the key that
	// blocks it (PENDING, PROCESSING, or FAILED under BlockFailed) before
	// them and not claimed with them. Rows without a key are claimed as
	// without Ordered. Needs schema version 7 (the order index). See the
	// package doc, "Ordered claim".
	Ordered bool
	// BlockFailed, with Ordered, makes a FAILED row that no operator
	// skipped (skipped_at) block its key like a PENDING one (head policy
	// BlockKey). Without it FAILED rows never block.
	BlockFailed bool
	// Skip lists events the claim must leave for other claimers, even
	// when due: those whose earlier attempt in the caller's process is
	// still running after its lease was lost (a handler that ignores its
	// context), so that another replica takes them instead of the caller
	// holding them behind that call. Ignored with Ordered (the ordered
	// claim cannot take one row of a key's run out of it: the caller
	// releases such an event at once). A few ids; nil for none.
	Skip []uuid.UUID
	// SkipSuspects leaves suspects (rows recovered before, see
	// Batch.Suspect) for later claims: the caller holds as many as it can
	// run for now (they run one at a time), and other events must not wait
	// behind them. Ignored with Ordered.
	SkipSuspects bool
	// ByType, with Ordered, orders each order key's events per event
	// type (dispatcher scope ScopeKeyAndType): the head of (key, type)
	// holds that pair's later rows only, and a run is a prefix of the
	// pair's blockers. The same order index serves it; each probe also
	// filters on the type.
	ByType bool
}

// Batch is the result of one Claim: rows now PROCESSING under Token.
type Batch struct {
	// Token fences every row of the batch; fresh and random for each claim.
	Token uuid.UUID
	// Events are the claimed rows, oldest due first, with Attempt set to
	// the number of this attempt (ended attempts + 1) and CreatedAt set.
	// In an ordered claim the rows of each order key are in seq order:
	// they keep the positions due order gave the key's rows, filled in
	// seq order (see ClaimParams.Ordered).
	Events []outbox.Event
	// Keys are, in an ordered claim, the order key of each of Events as
	// the claim read it ("" for none); nil otherwise.
	Keys []string
	// LeaseUntil is the database time at which the lease expires unless
	// renewed.
	LeaseUntil time.Time
	// Started says, for each of Events, whether the claim marked it
	// started (see ClaimParams.Start).
	Started []bool
	// Suspect says, for each of Events, whether its row was recovered
	// before (recoveries > 0: an attempt of it started and its worker
	// was lost). The claim never marks a suspect started, whatever
	// ClaimParams.Start says: the caller marks it with [Store.Start]
	// right before its attempt, so that a worker dying for another event
	// does not charge it a recovery again and again.
	Suspect []bool
	// Waited says, for each of Events, how long it had been due when the
	// claim took it (database clock: the claim's now() minus the row's
	// next_attempt_at, never negative).
	Waited []time.Duration
}

// Refs returns the refs of every event in the batch.
func (b Batch) Refs() []Ref {
	refs := make([]Ref, len(b.Events))
	for i, e := range b.Events {
		refs[i] = Ref{ID: e.ID, Token: b.Token}
	}
	return refs
}

// Claim turns up to p.Limit due PENDING rows into PROCESSING under a fresh
// token, in one statement. It returns an empty batch when nothing is due.
func (s *Store) Claim(ctx context.Context, db DB, p ClaimParams) (Batch, error) {
	if p.Owner == "" || p.Limit < 1 || p.Lease < time.Millisecond || p.Start < 0 || p.Start > p.Limit {
		return Batch{}, fmt.Errorf("%w: claim needs an owner, a limit >= 1, a lease >= 1ms and 0 <= start <= limit",
			outbox.ErrInvalidConfig)
	}
	token, err := uuid.NewRandom()
	if err != nil {
		return Batch{}, fmt.Errorf("pgoutbox: claim token: %w", err)
	}
	if p.Types != nil && len(p.Types) == 0 {
		return Batch{Token: token}, nil
	}
	forms, args := s.claimForms(p), []any{p.Limit, pgvalue.UUID(token), p.Owner, micros(p.Lease)}
	sql := forms.none
	switch {
	case p.Start == p.Limit:
		sql = forms.all
	case p.Start > 0:
		sql, args = forms.some, append(args, p.Start)
	}
	if p.Types != nil {
		args = append(args, p.Types)
	}
	if !p.Ordered {
		args = append(args, pgvalue.UUIDs(p.Skip), p.SkipSuspects) // never NULL: "id <> ALL (NULL)" is never true
	}
	b := Batch{Token: token}
	claimed := make([]claimedRow, 0, min(p.Limit, 1024)) // not BatchSize rows for every empty poll
	read := func(rows pgx.Rows) error {
		var e outbox.Event
		var sc scanned
		var r claimedRow
		var key *string
		targets := append(eventTargets(&e, &sc), &b.LeaseUntil, &r.due, &r.seq, &r.started, &r.suspect)
		if p.Ordered {
			targets = append(targets, &key)
		}
		_, err := pgx.ForEachRow(rows, targets, func() error {
			r.event = nextEvent(&e, sc)
			r.key = ""
			if key != nil {
				r.key, key = *key, nil
			}
			claimed = append(claimed, r)
			return nil
		})
		return err
	}
	if err := s.runClaim(ctx, db, p.Types != nil || p.Ordered, token, read, sql, args...); err != nil {
		return Batch{}, fmt.Errorf("pgoutbox: claim: %w", err)
	}
	inClaimOrder(&b, claimed, b.LeaseUntil.Add(-time.Duration(micros(p.Lease))*time.Microsecond), p.Ordered, p.ByType)
	return b, nil
}

// claimForms returns the forms of the claim p asks for: of every type or
// of p.Types, ordered or not.
func (s *Store) claimForms(p ClaimParams) claimForms {
	switch {
	case p.Ordered && p.Types != nil:
		return s.orderedTyped.forms(p.BlockFailed, p.ByType)
	case p.Ordered:
		return s.ordered.forms(p.BlockFailed, p.ByType)
	case p.Types != nil:
		return s.sql.typedClaims
	}
	return s.sql.claims
}

// runClaim sends a claim statement (under typedPlans when typed: a claim
// of some types, or an ordered claim, whose probes of the order index a
// skewed key distribution had turned into sequential scans) and hands
// its rows to read. When the rows could not be read (a broken connection,
// a timeout after the server committed), it releases whatever the claim
// may have taken (see releaseToken).
func (s *Store) runClaim(ctx context.Context, db DB, typed bool, token uuid.UUID, read func(pgx.Rows) error, sql string, args ...any) error {
	if typed {
		err := queryTyped(ctx, db, read, sql, args...)
		if err != nil {
			s.releaseToken(ctx, db, token)
		}
		return err
	}
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	if err := read(rows); err != nil {
		s.releaseToken(ctx, db, token)
		return err
	}
	return nil
}

// claimedRow is one claimed event with its place in claim order (due,
// seq) and, in an ordered claim, its order key.
type claimedRow struct {
	event   outbox.Event
	due     time.Time
	seq     int64
	key     string
	started bool
	suspect bool
}

// inClaimOrder fills b's events, oldest due first, then in insert order
// (the order of the due index the claim locked them in), with whether
// each was marked started and is a suspect, and how long each had been
// due at now, the claim's database time. With ordered, the rows of each
// key (byType: key and type) are then put in seq order (see inKeyOrder)
// and b.Keys is set.
func inClaimOrder(b *Batch, rows []claimedRow, now time.Time, ordered, byType bool) {
	slices.SortFunc(rows, func(a, b claimedRow) int {
		if c := a.due.Compare(b.due); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	if len(rows) == 0 {
		return
	}
	if ordered {
		inKeyOrder(rows, byType)
		b.Keys = make([]string, len(rows))
		for i, r := range rows {
			b.Keys[i] = r.key
		}
	}
	b.Events = make([]outbox.Event, len(rows))
	b.Started = make([]bool, len(rows))
	b.Suspect = make([]bool, len(rows))
	b.Waited = make([]time.Duration, len(rows))
	for i, r := range rows {
		b.Events[i], b.Started[i], b.Suspect[i] = r.event, r.started, r.suspect
		b.Waited[i] = max(0, now.Sub(r.due))
	}
}

// releaseToken returns every row still held under token to PENDING, best
// effort: after a claim whose result could not be read (a broken
// connection, a timeout after the server committed), so that its rows need
// not wait for their lease to expire and cost a recovery. It finds the rows
// by token alone, without an index: an error path, never the hot one.
func (s *Store) releaseToken(ctx context.Context, db DB, token uuid.UUID) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, _ = db.Exec(ctx, s.sql.releaseToken, pgvalue.UUID(token))
}

// scanned holds the columns of a row that nextEvent converts: the id as
// pgx decodes it directly (uuid.UUID would go through sql.Scanner and
// text) and the headers as raw JSON.
type scanned struct {
	id      [16]byte
	headers []byte
}

// eventTargets are the scan targets of eventColumns. The attempts column
// lands in e.Attempt, the id and headers in s; nextEvent finishes them.
func eventTargets(e *outbox.Event, s *scanned) []any {
	return []any{&s.id, &e.Type, &e.AggregateType, &e.AggregateID, &e.PartitionKey,
		&e.IdempotencyKey, &e.ContentType, &e.Payload, &s.headers, &e.Attempt, &e.Snoozes, &e.CreatedAt}
}

// nextEvent returns the scanned event, with its id, Attempt = ended
// attempts + 1 and its headers decoded, and clears e for the next row.
func nextEvent(e *outbox.Event, s scanned) outbox.Event {
	out := *e
	out.ID = s.id
	out.Attempt++
	out.Headers = decodeHeaders(s.headers)
	*e = outbox.Event{}
	return out
}

// decodeHeaders reads the headers column. Emit writes an object of
// strings; a row written by other means may hold other JSON values, which
// are kept as their JSON text rather than failing the whole claim. Anything
// but an object gives no headers.
func decodeHeaders(raw []byte) map[string]string {
	if string(raw) == "{}" {
		return nil // the common case, without a JSON decoder
	}
	var strs map[string]string
	if json.Unmarshal(raw, &strs) == nil {
		if len(strs) == 0 {
			return nil
		}
		return strs
	}
	var vals map[string]json.RawMessage
	if json.Unmarshal(raw, &vals) != nil || len(vals) == 0 {
		return nil
	}
	strs = make(map[string]string, len(vals))
	for k, v := range vals {
		var str string
		if json.Unmarshal(v, &str) != nil {
			str = string(v)
		}
		strs[k] = str
	}
	return strs
}

// RefResult says what a Renew or Release did to the refs it was given.
type RefResult struct {
	// Done are the refs changed: renewed, or released.
	Done []Ref
	// Busy are the refs whose rows were locked by another transaction at
	// that moment. They were skipped, not waited for, and not changed; try
	// them again later. A ref in neither list is no longer held under its
	// token (expired, recovered, completed or re-claimed).
	Busy []Ref
}

// Renew extends the lease of every held row in refs to the database's
// now() + lease. It never waits for a row lock: rows locked elsewhere at
// that moment are reported Busy. A row is renewed only while its lease has
// not passed (database clock).
func (s *Store) Renew(ctx context.Context, db DB, refs []Ref, lease time.Duration) (RefResult, error) {
	return s.RenewIn(ctx, db, refs, lease, MaxRefsPerStatement)
}

// RenewIn is Renew in statements of at most per refs (1 to
// MaxRefsPerStatement), still in one round trip and one transaction: a
// statement the server ends (statement_timeout) rolls back the others, and
// smaller statements may fit where the full ones did not.
func (s *Store) RenewIn(ctx context.Context, db DB, refs []Ref, lease time.Duration, per int) (RefResult, error) {
	if lease < time.Millisecond {
		return RefResult{}, fmt.Errorf("%w: renew needs a lease >= 1ms", outbox.ErrInvalidConfig)
	}
	res, err := s.changeRefs(ctx, db, customPlans, s.sql.renew, refs, per, micros(lease))
	if err != nil {
		return RefResult{}, fmt.Errorf("pgoutbox: renew: %w", err)
	}
	return res, nil
}

// Start marks held rows started (started_at = now()), so that a recovery
// of their lease counts against the poison budget: call it before an
// attempt of a row the claim did not mark starts. Like Renew it requires
// an unexpired lease and never waits for a row lock (Busy rows are not
// marked; try again). With lazy, its commit does not wait for the disk
// (see lazyStart): only for at-least-once delivery, where a mark lost in
// a server crash costs a recovery charge, never a second delivery that
// at-most-once forbids.
func (s *Store) Start(ctx context.Context, db DB, refs []Ref, lazy bool) (RefResult, error) {
	return s.StartIn(ctx, db, refs, lazy, MaxRefsPerStatement)
}

// StartIn is Start in statements of at most per refs (see RenewIn).
func (s *Store) StartIn(ctx context.Context, db DB, refs []Ref, lazy bool, per int) (RefResult, error) {
	settings := customPlans
	if lazy {
		settings = lazyStart
	}
	res, err := s.changeRefs(ctx, db, settings, s.sql.start, refs, per)
	if err != nil {
		return RefResult{}, fmt.Errorf("pgoutbox: start: %w", err)
	}
	return res, nil
}

// lazyStart is customPlans plus an asynchronous commit, for a lazy Start:
// the commit of a start mark does not wait for its WAL to reach disk, so
// that marking a run's events one wave at a time (per-key ordering) does
// not cost a disk flush per event. Under at-least-once the mark only
// counts a recovery against the poison budget: a server crash that loses
// the last marks leaves those rows PROCESSING and unmarked, and their
// recovery is not charged, as if their attempts had not begun. Under
// at-most-once a lost mark would let a started event be delivered again,
// so there Start is never lazy. Nothing else depends on the mark's
// durability: the rows' lease and token are written by the claim. Local
// to the batch's transaction.
const lazyStart = `SELECT set_config('plan_cache_mode', 'force_custom_plan', true), set_config('synchronous_commit', 'off', true)`

// changeRefs runs one lockedRefs statement per per refs (at most
// MaxRefsPerStatement), all in one round trip under settings (see
// queryBatchUnder), and gathers their results.
func (s *Store) changeRefs(ctx context.Context, db DB, settings, sql string, refs []Ref, per int, args ...any) (res RefResult, err error) {
	if per < 1 || per > MaxRefsPerStatement {
		return RefResult{}, fmt.Errorf("%w: refs per statement must be between 1 and %d", outbox.ErrInvalidConfig, MaxRefsPerStatement)
	}
	if len(refs) == 0 {
		return RefResult{}, nil
	}
	batch := &pgx.Batch{}
	for chunk := range slices.Chunk(refs, per) {
		ids, tokens := make(pgvalue.UUIDArray, len(chunk)), make(pgvalue.UUIDArray, len(chunk))
		for i, r := range chunk {
			ids[i], tokens[i] = pgvalue.UUID(r.ID), pgvalue.UUID(r.Token)
		}
		batch.Queue(sql, append([]any{ids, tokens}, args...)...)
	}
	err = queryBatchUnder(ctx, db, settings, batch, func(_ int, rows pgx.Rows) error {
		var id, token [16]byte
		var done bool
		_, err := pgx.ForEachRow(rows, []any{&id, &token, &done}, func() error {
			if done {
				res.Done = append(res.Done, Ref{ID: id, Token: token})
			} else {
				res.Busy = append(res.Busy, Ref{ID: id, Token: token})
			}
			return nil
		})
		return err
	})
	if err != nil {
		return RefResult{}, err
	}
	return res, nil
}

// MaxRefsPerStatement bounds the rows one statement names. Renew and
// Release send one statement per this many rows, Complete one per claim
// token and per this many rows, all in one round trip, so that no
// statement grows past what its plan handles well.
const MaxRefsPerStatement = 1000

// tokenGroup is up to MaxRefsPerStatement ids held under one token, with
// their positions in the caller's slice.
type tokenGroup struct {
	token pgtype.UUID       // pgtype: pgx encodes it in binary, or in text
	ids   pgvalue.UUIDArray // where it must pick the type itself (see pgvalue)
	index []int
}

// groupByToken splits refs by token (first seen first) and by
// MaxRefsPerStatement.
func groupByToken(refs []Ref) []tokenGroup {
	var groups []tokenGroup
	open := map[[16]byte]int{} // token -> its group still filling
	for i, r := range refs {
		g, ok := open[r.Token]
		if !ok || len(groups[g].ids) == MaxRefsPerStatement {
			groups = append(groups, tokenGroup{token: pgvalue.UUID(r.Token)})
			g = len(groups) - 1
			open[r.Token] = g
		}
		groups[g].ids = append(groups[g].ids, pgvalue.UUID(r.ID))
		groups[g].index = append(groups[g].index, i)
	}
	return groups
}

// queryBatch sends batch in one round trip and hands each statement's
// rows, in order, to each, which must read or close them. Sent on a pool
// or a connection, the batch runs as one implicit transaction under
// customPlans; sent in a caller's transaction, the setting lasts until
// that transaction ends (the dispatcher always passes its pool).
func queryBatch(ctx context.Context, db DB, batch *pgx.Batch, each func(i int, rows pgx.Rows) error) (err error) {
	return queryBatchUnder(ctx, db, customPlans, batch, each)
}

// queryBatchUnder is queryBatch with the planner settings of settings (a
// SELECT of set_config(…, true) calls) instead of customPlans.
func queryBatchUnder(ctx context.Context, db DB, settings string, batch *pgx.Batch, each func(i int, rows pgx.Rows) error) (err error) {
	full := &pgx.Batch{}
	full.Queue(settings)
	full.QueuedQueries = append(full.QueuedQueries, batch.QueuedQueries...)
	br := db.SendBatch(ctx, full)
	defer func() {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	for i := range full.Len() {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		if i == 0 {
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			continue
		}
		if err := each(i-1, rows); err != nil {
			return err
		}
	}
	return nil
}

// customPlans makes PostgreSQL plan each statement of the transaction for
// its own parameters. The statements that name held rows by id (renewals,
// start marks, releases, completions, outcome reads) are prepared by pgx,
// and from a prepared statement's sixth execution PostgreSQL may switch
// to a generic plan, which does not know how many ids there are: it
// joined the rows to the unnest() of the ids in a nested loop, rescanning
// the ids for every row, O(B²) (a renewal of 3,000 rows took about 1.2s,
// a completion with 3,000 failures 2-3s). Custom plans of the same
// statements took 30-45ms. The setting is local to the transaction, so it
// also holds behind a pooler in transaction mode.
const customPlans = `SELECT set_config('plan_cache_mode', 'force_custom_plan', true)`

// typedPlans are the planner settings of the statements that filter a
// walk of an index on more than its key (a typed claim, the ordered
// claims, Waiting): the walk must read the index in its order and only
// as far as needed. Left to itself, PostgreSQL planned a claim of 100
// rows of 1 type among 200 (its filter keeps 1 due row in 200) as a
// sequential scan of all 40,000 rows and a sort (measured with
// TestTypedClaimPlanDoesNotGrowWithTypes's table), where the walk of the
// due index reads a few thousand buffers; it had answered the ordered
// claims' probes of the order index by a sequential scan on a table whose
// statistics said one key held most rows. A claim over every type needs
// none of this: its one index scan from the head is its only sensible
// plan. JIT goes too: a plan that must use a disabled node anyway (a sort
// of the few groups of Waiting) carries a cost past jit_above_cost, and
// compiling it took 1.5s for a count of 12 rows. Local to the batch's
// transaction, like customPlans.
const typedPlans = `SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_sort', 'off', true),
	set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true)`

// queryTyped runs one statement under typedPlans, in one round trip, and
// hands its rows to each.
func queryTyped(ctx context.Context, db DB, each func(rows pgx.Rows) error, sql string, args ...any) error {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	return queryBatchUnder(ctx, db, typedPlans, b, func(_ int, rows pgx.Rows) error { return each(rows) })
}

// Release returns held rows that were never started to PENDING, keeping
// their due time and attempt count. It does not require an unexpired lease:
// releasing is always safe for the token's owner. Like Renew it never waits
// for a row lock; rows locked elsewhere are reported Busy and left to
// expire and be recovered.
func (s *Store) Release(ctx context.Context, db DB, refs []Ref) (RefResult, error) {
	res, err := s.changeRefs(ctx, db, customPlans, s.sql.release, refs, MaxRefsPerStatement)
	if err != nil {
		return RefResult{}, fmt.Errorf("pgoutbox: release: %w", err)
	}
	return res, nil
}

// ReleaseLater is Release with a back-off, for rows the caller claimed
// but cannot deliver (no handler, no route): each row returns to PENDING
// unstarted and uncharged (attempts, recoveries and snoozes unchanged, no
// start mark, no token), due again at the database's now() plus a tenth
// of its age (now() - created_at), at least min and at most max. The
// back-off keeps the caller from claiming the same rows again at once,
// while another dispatcher that can deliver them claims them within min
// for a new event; it grows with the age of an event that nothing
// delivers, so that such events cost each claimer a bounded share of its
// claims. Busy rows are reported as by Release.
func (s *Store) ReleaseLater(ctx context.Context, db DB, refs []Ref, minDelay, maxDelay time.Duration) (RefResult, error) {
	if minDelay < 0 || maxDelay < minDelay {
		return RefResult{}, fmt.Errorf("%w: release later needs 0 <= min <= max", outbox.ErrInvalidConfig)
	}
	res, err := s.changeRefs(ctx, db, customPlans, s.sql.releaseLater, refs, MaxRefsPerStatement, micros(minDelay), micros(maxDelay))
	if err != nil {
		return RefResult{}, fmt.Errorf("pgoutbox: release later: %w", err)
	}
	return res, nil
}

// RecoverParams are the inputs of Recover.
type RecoverParams struct {
	// Limit bounds the rows one call recovers; at least 1.
	Limit int
	// MaxRecoveries is how many times a row whose attempt had started may
	// be recovered; the next such expiry makes it FAILED with worker_lost.
	// A row whose attempt never started (no started_at) is returned to
	// PENDING as it was, without counting.
	MaxRecoveries int
	// AtMostOnce makes every expired row whose attempt had started FAILED
	// with worker_lost, since its handler may have run.
	AtMostOnce bool
}

// RecoverResult lists what Recover changed.
type RecoverResult struct {
	// Pending are the rows returned to PENDING, due now.
	Pending []uuid.UUID
	// Failed are the events that became FAILED with worker_lost, as
	// stored (Attempt is the number the next attempt would have had).
	Failed []outbox.Event
}

// Recover returns up to p.Limit PROCESSING rows whose lease has expired to
// PENDING (or FAILED, see RecoverParams, moved into the dead letters), in
// one statement, without spending retry budget.
func (s *Store) Recover(ctx context.Context, db DB, p RecoverParams) (RecoverResult, error) {
	if p.Limit < 1 || p.MaxRecoveries < 0 {
		return RecoverResult{}, fmt.Errorf("%w: recover needs a limit >= 1 and max recoveries >= 0", outbox.ErrInvalidConfig)
	}
	rows, err := db.Query(ctx, s.sql.recover, p.Limit, p.MaxRecoveries, p.AtMostOnce)
	if err != nil {
		return RecoverResult{}, fmt.Errorf("pgoutbox: recover: %w", err)
	}
	var res RecoverResult
	var status outbox.Status
	var e outbox.Event
	var sc scanned
	_, err = pgx.ForEachRow(rows, append([]any{&status}, eventTargets(&e, &sc)...), func() error {
		ev := nextEvent(&e, sc)
		if status == outbox.StatusFailed {
			res.Failed = append(res.Failed, ev)
		} else {
			res.Pending = append(res.Pending, ev.ID)
		}
		return nil
	})
	if err != nil {
		return RecoverResult{}, fmt.Errorf("pgoutbox: recover: %w", err)
	}
	return res, nil
}

// NextDue returns how long until the earliest PENDING row of types (of
// every type when types is nil) becomes due, by the database clock (zero
// or negative when one is due now), and false when there is no such row.
// Of every type it reads the head of the due index only; of some types,
// at most nextDueWindow entries of the due index from its head and as
// many from now() on (see typedNextDueSQL): a row of types behind more
// rows of other types than that is not seen (false, or a later time),
// and is found by the next poll or claim.
func (s *Store) NextDue(ctx context.Context, db DB, types []string) (time.Duration, bool, error) {
	sql, args := s.sql.nextDue, []any(nil)
	if types != nil {
		if len(types) == 0 {
			return 0, false, nil
		}
		sql, args = s.sql.typedNextDue, []any{types}
	}
	return s.nextDue(ctx, db, sql, args...)
}

// NextHeadDue is NextDue for ordered claims (ClaimParams.Ordered, with
// blockFailed as BlockFailed and byType as ByType): it counts only the
// PENDING rows that are the head of their key (byType: of their key and
// type), or have no key, since an ordered claim takes no other. A blocked
// key's due rows do not make it report zero.
func (s *Store) NextHeadDue(ctx context.Context, db DB, types []string, blockFailed, byType bool) (time.Duration, bool, error) {
	if types != nil && len(types) == 0 {
		return 0, false, nil
	}
	var args []any
	if types != nil {
		args = []any{types}
	}
	return s.nextDue(ctx, db, orderedNextDueSQL(s.names.Qualified, s.names.Dead, types != nil, scope{byType: byType}, blockFailed), args...)
}

// nextDue runs a next-due statement and reads its wait.
func (s *Store) nextDue(ctx context.Context, db DB, sql string, args ...any) (time.Duration, bool, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return 0, false, fmt.Errorf("pgoutbox: next due: %w", err)
	}
	us, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[*int64])
	if err != nil {
		return 0, false, fmt.Errorf("pgoutbox: next due: %w", err)
	}
	if us == nil {
		return 0, false, nil
	}
	return time.Duration(*us) * time.Microsecond, true, nil
}

// WaitingParams are the inputs of Waiting.
type WaitingParams struct {
	// Except are the types not to count: those the caller claims.
	Except []string
	// DueFor is how long a row must have been due to count: a row of a
	// type another dispatcher claims is normally claimed well within it.
	DueFor time.Duration
	// PerType bounds the rows counted per type; at least 1.
	PerType int
	// MaxTypes bounds the types counted, the first in type order; at
	// least 1. With PerType it bounds the rows read (see Waiting).
	MaxTypes int
}

// TypeCount is a number of rows of one event type.
type TypeCount struct {
	Type  string
	Count int64
}

// Waiting counts, per event type not in p.Except, the PENDING rows due
// for at least p.DueFor (database clock), up to p.PerType per type, for
// at most p.MaxTypes types, in type order, among the rows due longest. It
// reads the due index only, from its head: at most p.PerType × p.MaxTypes
// entries and never more than maxWaitingRows (10,000), however large the
// backlog (see waitingSQL): a type whose rows all wait behind that many
// older rows of other types is not counted until those are claimed.
func (s *Store) Waiting(ctx context.Context, db DB, p WaitingParams) ([]TypeCount, error) {
	if p.PerType < 1 || p.MaxTypes < 1 || p.DueFor < 0 {
		return nil, fmt.Errorf("%w: waiting needs per type >= 1, max types >= 1 and due for >= 0", outbox.ErrInvalidConfig)
	}
	except := p.Except
	if except == nil {
		except = []string{}
	}
	var counts []TypeCount
	err := queryTyped(ctx, db, func(rows pgx.Rows) (err error) {
		counts, err = pgx.CollectRows(rows, pgx.RowToStructByPos[TypeCount])
		return err
	}, s.sql.waiting, except, micros(p.DueFor), p.PerType, p.MaxTypes)
	if err != nil {
		return nil, fmt.Errorf("pgoutbox: waiting: %w", err)
	}
	return counts, nil
}
