package admin

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/relay/retention"
	"github.com/pgoutbox/pgoutbox/internal/relay/store"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// ErrUnknownGroup is matched (errors.Is) by the error of a relay call
// that names a consumer group the log does not have.
var ErrUnknownGroup = errors.New("pgoutbox: admin: no such relay group")

// ErrUnknownKey is matched by the error of [Relay.RequestReplay] and
// [Relay.RequestSkip] for a key the group has not parked.
var ErrUnknownKey = errors.New("pgoutbox: admin: no such parked key")

// ErrGroupExists is matched by the error of [Relay.CreateGroup] for a
// group the log has already.
var ErrGroupExists = errors.New("pgoutbox: admin: relay group exists")

// RelayConfig says which log (a table migrated with outbox.KindLog) to
// operate on.
type RelayConfig struct {
	// Log is the log table. Defaults to public.outbox_events; see
	// [outbox.Table] for the names it accepts.
	Log outbox.Table
}

// Relay runs the operator statements of one log and its consumer groups
// (docs/relay-design.md, sections 4 to 6). Like [Admin] it keeps only the
// database handle and the names, and is safe for concurrent use.
type Relay struct {
	db    DB
	names sqlname.Names
	// store is the relay's own statements on the log
	// (internal/relay/store), shared where an operator does what the
	// relay does: groups, lag, parts.
	store *store.Store
}

// NewRelay returns a Relay for cfg on db. A nil db gives an
// *outbox.InputError naming "db", an invalid table name an
// *outbox.ConfigError naming "Log". It does not touch the database.
func NewRelay(db DB, cfg RelayConfig) (*Relay, error) {
	if db == nil {
		return nil, &outbox.InputError{Field: "db", Reason: "is nil"}
	}
	names, err := sqlname.For(cfg.Log)
	if err != nil {
		return nil, &outbox.ConfigError{Field: "Log", Reason: "is invalid", Err: err}
	}
	st, err := store.New(db, names.Table)
	if err != nil {
		return nil, &outbox.ConfigError{Field: "Log", Reason: "is invalid", Err: err}
	}
	return &Relay{db: db, names: names, store: st}, nil
}

// Log returns the (defaulted) log table the Relay works on.
func (r *Relay) Log() outbox.Table { return r.names.Table }

// relayError is the error of a call naming a group (and a key) that
// does not exist: it reads "pgoutbox: admin: <op> <group> [key <key>]
// in <log>: <sentinel's reason>" and matches the sentinel.
type relayError struct {
	op, group, key, log string
	err                 error
}

func (e *relayError) Error() string {
	s := "pgoutbox: admin: " + e.op + " group " + strconv.Quote(e.group)
	if e.key != "" || errors.Is(e.err, ErrUnknownKey) {
		s += " key " + strconv.Quote(e.key)
	}
	return s + " in " + e.log + ": " + strings.TrimPrefix(errtext.Trim(e.err.Error()), "admin: ")
}

func (e *relayError) Unwrap() error { return e.err }

func (r *Relay) fail(op, group, key string, sentinel error) error {
	return &relayError{op: op, group: group, key: key, log: r.names.Table.String(), err: sentinel}
}

// checkGroup checks a group name: 1 to 200 characters of text.
func checkGroup(group string) error {
	if n := len([]rune(group)); n < 1 || n > 200 {
		return inputErr("group", "has %d characters, must have 1 to 200", n)
	}
	return checkText("group", group)
}

// Group is one consumer group of the log: where its cursor is, who holds
// it, how far behind the log it is, and whether it stopped.
type Group struct {
	// Name is the group's name.
	Name string `json:"name"`
	// LastTick is the cursor tick: every event visible in its snapshot
	// is done. BatchTick and BatchSeq, when not zero, are an open batch
	// (its target tick, the last seq done in it).
	LastTick  int64 `json:"last_tick"`
	BatchTick int64 `json:"batch_tick,omitempty"`
	BatchSeq  int64 `json:"batch_seq,omitempty"`
	// Owner is the reader that took the group's lease last; Leased says
	// its lease has not expired (database clock).
	Owner      string     `json:"owner,omitempty"`
	Leased     bool       `json:"leased"`
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
	// StoppedReason is why the group stopped (a snapshot that went
	// backwards, a changed database); empty while it runs. A stopped
	// group reads nothing until [Relay.Resume].
	StoppedReason string `json:"stopped_reason,omitempty"`
	// CreatedAt and MovedAt are when the group was created and its
	// cursor last moved.
	CreatedAt time.Time `json:"created_at"`
	MovedAt   time.Time `json:"moved_at"`
	// LagEvents is the newest tick's last seq less the cursor tick's: the
	// events written since the cursor (rolled-back inserts count too).
	LagEvents int64 `json:"lag_events"`
	// LagSeconds is the age of the first tick after the cursor: how long
	// the oldest undelivered tick has waited; 0 when caught up.
	LagSeconds float64 `json:"lag_seconds"`
	// ParkedKeys is how many keys the group has parked.
	ParkedKeys int64 `json:"parked_keys"`
}

// Groups returns every consumer group of the log, by name. Every group
// holds the log's retention, stopped or without a lease included: a
// group left behind keeps its parts (drop it with [Relay.DropGroup]).
func (r *Relay) Groups(ctx context.Context) ([]Group, error) {
	return r.groups(ctx, "")
}

// Group returns one consumer group; an unknown one gives an error
// matching [ErrUnknownGroup].
func (r *Relay) Group(ctx context.Context, group string) (Group, error) {
	if err := checkGroup(group); err != nil {
		return Group{}, err
	}
	gs, err := r.groups(ctx, group)
	if err != nil {
		return Group{}, err
	}
	if len(gs) == 0 {
		return Group{}, r.fail("read", group, "", ErrUnknownGroup)
	}
	return gs[0], nil
}

func (r *Relay) groups(ctx context.Context, group string) ([]Group, error) {
	gs, err := r.store.Groups(ctx, group)
	if err != nil {
		return nil, errtext.Wrap(err, "admin: relay groups of %s", r.names.Table)
	}
	out := make([]Group, len(gs))
	for i, g := range gs {
		out[i] = Group{Name: g.Name, LastTick: g.Cursor.LastTick, BatchTick: g.Cursor.BatchTick, BatchSeq: g.Cursor.BatchSeq,
			Owner: g.Owner, Leased: g.Leased, LeaseUntil: g.LeaseUntil, StoppedReason: g.StoppedReason,
			CreatedAt: g.CreatedAt, MovedAt: g.MovedAt, LagEvents: g.Lag.Events, LagSeconds: g.Lag.Seconds, ParkedKeys: g.ParkedKeys}
	}
	return out, nil
}

// RelayStatus is the log's state for an operator: its ticker, newest
// tick, parts and groups.
type RelayStatus struct {
	// TickerOwner is the relay that took the ticker's lease last;
	// TickerLeased says the lease has not expired.
	TickerOwner  string `json:"ticker_owner,omitempty"`
	TickerLeased bool   `json:"ticker_leased"`
	// NewestTick is the newest tick's id and TickAge its age.
	NewestTick int64         `json:"newest_tick"`
	TickAge    time.Duration `json:"tick_age"`
	// Parts is how many parts the log has attached; HeadroomXids how many
	// transaction ids are left before the last part's upper bound (an
	// insert beyond it fails: the ticker keeps parts ahead).
	Parts        int    `json:"parts"`
	HeadroomXids uint64 `json:"headroom_xids"`
	// Groups is every consumer group.
	Groups []Group `json:"groups"`
}

// Status returns the log's state. A table that is not a migrated log
// gives the statement's error (SQLSTATE 42P01).
func (r *Relay) Status(ctx context.Context) (RelayStatus, error) {
	var s RelayStatus
	var age float64
	err := r.db.QueryRow(ctx, `SELECT coalesce(k.owner, ''), coalesce(k.lease_until > now(), false),
			coalesce(t.tick_id, 0), coalesce(extract(epoch FROM now() - t.tick_time)::float8, 0)
		FROM `+r.names.Log(sqlname.SuffixTicker)+` k
		LEFT JOIN LATERAL (SELECT tick_id, tick_time FROM `+r.names.Log(sqlname.SuffixTicks)+`
			ORDER BY tick_id DESC LIMIT 1) t ON true`).Scan(&s.TickerOwner, &s.TickerLeased, &s.NewestTick, &age)
	if err != nil {
		return s, errtext.Wrap(err, "admin: relay status of %s", r.names.Table)
	}
	s.TickAge = time.Duration(age * float64(time.Second))
	if s.Parts, s.HeadroomXids, err = r.store.PartsState(ctx); err != nil {
		return s, errtext.Wrap(err, "admin: relay status of %s", r.names.Table)
	}
	s.Groups, err = r.Groups(ctx)
	return s, err
}

// From says where a new group's cursor starts.
type From int

const (
	// FromLatest starts at the newest tick: the group delivers the
	// events written after it.
	FromLatest From = iota
	// FromOldest starts at the oldest tick the log keeps: tick 1 (the
	// whole log) until retention deleted it, then the oldest cursor
	// tick of the groups, whose earlier events every group delivered
	// and retention may have truncated.
	FromOldest
)

// CreateGroup creates a consumer group whose cursor is at the tick from
// names. A group of that name gives an error matching [ErrGroupExists].
// A relay configured with the group starts delivering at its next
// batch.
func (r *Relay) CreateGroup(ctx context.Context, group string, from From) error {
	if err := checkGroup(group); err != nil {
		return err
	}
	var at store.From
	switch from {
	case FromLatest:
		at = store.Latest
	case FromOldest:
		at = store.Oldest
	default:
		return inputErr("from", "is %d, want FromLatest or FromOldest", from)
	}
	err := r.store.CreateGroup(ctx, group, at)
	if errors.Is(err, store.ErrGroupExists) {
		return r.fail("create", group, "", ErrGroupExists)
	}
	return errtext.Wrap(err, "admin: create relay group %q in %s", group, r.names.Table)
}

// DropGroup deletes a consumer group with its parked keys and events,
// in one transaction. Its reader, if one runs, loses its lease at its
// next renewal or cursor move. The log's retention no longer waits for
// it. An unknown group gives an error matching [ErrUnknownGroup].
func (r *Relay) DropGroup(ctx context.Context, group string) error {
	if err := checkGroup(group); err != nil {
		return err
	}
	err := r.store.DropGroup(ctx, group)
	if errors.Is(err, store.ErrNoGroup) {
		return r.fail("drop", group, "", ErrUnknownGroup)
	}
	return errtext.Wrap(err, "admin: drop relay group %q in %s", group, r.names.Table)
}

// Resume clears a stopped group's stopped_reason, so that its reader
// reads again, and returns the reason it cleared ("" when the group was
// not stopped). An unknown group gives an error matching
// [ErrUnknownGroup].
func (r *Relay) Resume(ctx context.Context, group string) (string, error) {
	if err := checkGroup(group); err != nil {
		return "", err
	}
	cursors := r.names.Log(sqlname.SuffixCursors)
	var was string
	err := r.db.QueryRow(ctx, `UPDATE `+cursors+` c SET stopped_reason = NULL
		FROM (SELECT grp, stopped_reason FROM `+cursors+` WHERE grp = $1 FOR UPDATE) o
		WHERE c.grp = o.grp RETURNING coalesce(o.stopped_reason, '')`, group).Scan(&was)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", r.fail("resume", group, "", ErrUnknownGroup)
	}
	return was, errtext.Wrap(err, "admin: resume relay group %q in %s", group, r.names.Table)
}

// RequestReplay asks the group's reader to publish the key's parked
// events again, in seq order, before the key's events of its next batch,
// and to unpark the key (RequestSkip: to delete them and unpark it). It
// only records the request (replay_requested_at, clearing a skip
// request: the latest request wins): the reader that holds the group's
// lease carries it out at a batch boundary, in the cursor move of that
// batch; doing it here would race a batch not yet read that holds the
// key's newer events. Nothing happens while no reader runs. A group or
// key unknown gives an error matching [ErrUnknownGroup] or
// [ErrUnknownKey].
func (r *Relay) RequestReplay(ctx context.Context, group, key string) error {
	return r.request(ctx, "replay", group, key, "replay_requested_at = now(), skip_requested_at = NULL")
}

// RequestSkip is [Relay.RequestReplay] for skipping: the reader deletes
// the key's parked events without publishing them, and unparks the key.
func (r *Relay) RequestSkip(ctx context.Context, group, key string) error {
	return r.request(ctx, "skip", group, key, "skip_requested_at = now(), replay_requested_at = NULL")
}

func (r *Relay) request(ctx context.Context, op, group, key, set string) error {
	if err := checkGroup(group); err != nil {
		return err
	}
	if err := checkText("key", key); err != nil {
		return err
	}
	var keyFound, groupFound bool
	err := r.db.QueryRow(ctx, `WITH u AS (UPDATE `+r.names.Log(sqlname.SuffixParkedKeys)+` SET `+set+`
			WHERE grp = $1 AND key = $2 RETURNING 1)
		SELECT EXISTS (SELECT FROM u), EXISTS (SELECT FROM `+r.names.Log(sqlname.SuffixCursors)+` WHERE grp = $1)`,
		group, key).Scan(&keyFound, &groupFound)
	switch {
	case err != nil:
		return errtext.Wrap(err, "admin: request %s of a parked key of group %q in %s", op, group, r.names.Table)
	case !groupFound:
		return r.fail(op, group, "", ErrUnknownGroup)
	case !keyFound:
		return r.fail(op, group, key, ErrUnknownKey)
	}
	return nil
}

// DefaultParkedLimit is the page size of ParkedKeys and ParkedEvents
// when the query's Limit is 0; MaxParkedLimit the largest they accept.
const (
	DefaultParkedLimit = 100
	MaxParkedLimit     = 1000
)

// ParkedKey is a key a group parked: its events wait in the group's
// parked events until a replay or skip request is carried out.
type ParkedKey struct {
	Key       string    `json:"key"`
	ParkedAt  time.Time `json:"parked_at"`
	ErrorCode string    `json:"error_code,omitempty"`
	Error     string    `json:"error,omitempty"`
	// Events is how many of the key's events are parked.
	Events int64 `json:"events"`
	// ReplayRequestedAt and SkipRequestedAt are a pending request.
	ReplayRequestedAt *time.Time `json:"replay_requested_at,omitempty"`
	SkipRequestedAt   *time.Time `json:"skip_requested_at,omitempty"`
}

// ParkedKeysQuery pages a group's parked keys in key order. The empty
// key, under which events without a key are parked (each alone), sorts
// first: it is on the first page only.
type ParkedKeysQuery struct {
	// After is the last key of the previous page ("" for the first; a
	// first page of Limit 1 that holds only the empty key is followed by
	// the same page: ask for more than one key).
	After string
	// Limit is the page size (0: DefaultParkedLimit).
	Limit int
}

// ParkedKeys returns a page of the group's parked keys. An unknown group
// gives an error matching [ErrUnknownGroup].
func (r *Relay) ParkedKeys(ctx context.Context, group string, q ParkedKeysQuery) ([]ParkedKey, error) {
	limit, err := r.checkPage(group, q.After, q.Limit)
	if err != nil {
		return nil, err
	}
	rows, err := r.db.Query(ctx, `SELECT k.key, k.parked_at, coalesce(k.error_code, ''), coalesce(k.error, ''),
			(SELECT count(*) FROM `+r.names.Log(sqlname.SuffixParked)+` p WHERE p.grp = k.grp AND p.key = k.key),
			k.replay_requested_at, k.skip_requested_at
		FROM `+r.names.Log(sqlname.SuffixParkedKeys)+` k WHERE k.grp = $1 AND ($2 = '' OR k.key > $2) ORDER BY k.key LIMIT $3`,
		group, q.After, limit)
	if err != nil {
		return nil, errtext.Wrap(err, "admin: parked keys of group %q in %s", group, r.names.Table)
	}
	var k ParkedKey
	out, err := pgx.AppendRows([]ParkedKey(nil), rows, func(row pgx.CollectableRow) (ParkedKey, error) {
		err := row.Scan(&k.Key, &k.ParkedAt, &k.ErrorCode, &k.Error, &k.Events, &k.ReplayRequestedAt, &k.SkipRequestedAt)
		return k, err
	})
	if err != nil {
		return nil, errtext.Wrap(err, "admin: parked keys of group %q in %s", group, r.names.Table)
	}
	return out, r.groupExists(ctx, "parked keys", group, len(out))
}

func (r *Relay) checkPage(group, after string, limit int) (int, error) {
	if err := checkGroup(group); err != nil {
		return 0, err
	}
	if err := checkText("After", after); err != nil {
		return 0, err
	}
	return checkLimit(limit, DefaultParkedLimit, MaxParkedLimit)
}

// groupExists gives ErrUnknownGroup for an empty page of a group that
// does not exist.
func (r *Relay) groupExists(ctx context.Context, op, group string, n int) error {
	if n > 0 {
		return nil
	}
	var ok bool
	err := r.db.QueryRow(ctx, `SELECT EXISTS (SELECT FROM `+r.names.Log(sqlname.SuffixCursors)+` WHERE grp = $1)`, group).Scan(&ok)
	if err != nil {
		return errtext.Wrap(err, "admin: %s of group %q in %s", op, group, r.names.Table)
	}
	if !ok {
		return r.fail(op, group, "", ErrUnknownGroup)
	}
	return nil
}

// ParkedEvent is one parked event of a group. Payload and Headers are
// read only when the query asks (WithPayload).
type ParkedEvent struct {
	Seq            int64     `json:"seq"`
	Xid            uint64    `json:"xid"`
	ID             uuid.UUID `json:"id"`
	Type           string    `json:"type"`
	AggregateType  string    `json:"aggregate_type,omitempty"`
	AggregateID    string    `json:"aggregate_id,omitempty"`
	PartitionKey   string    `json:"partition_key,omitempty"`
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	ContentType    string    `json:"content_type,omitempty"`
	// Key is the key the event is parked under ("" for an event
	// without one, parked alone).
	Key         string    `json:"key,omitempty"`
	PayloadSize int       `json:"payload_size"`
	CreatedAt   time.Time `json:"created_at"`
	ParkedAt    time.Time `json:"parked_at"`
	ErrorCode   string    `json:"error_code,omitempty"`
	Error       string    `json:"error,omitempty"`
	// Payload and Headers are set only WithPayload.
	Payload []byte            `json:"payload,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

// ParkedEventsQuery pages a group's parked events in seq order.
type ParkedEventsQuery struct {
	// Key, when not empty, keeps the events of that key only.
	Key string
	// NoKey keeps the events parked without a key (under the empty key)
	// only; Key must then be empty.
	NoKey bool
	// AfterSeq is the last seq of the previous page (0 for the first).
	AfterSeq int64
	// Limit is the page size (0: DefaultParkedLimit).
	Limit int
	// WithPayload reads the payloads and headers too.
	WithPayload bool
}

// ParkedEvents returns a page of the group's parked events. An unknown
// group gives an error matching [ErrUnknownGroup].
func (r *Relay) ParkedEvents(ctx context.Context, group string, q ParkedEventsQuery) ([]ParkedEvent, error) {
	limit, err := r.checkPage(group, q.Key, q.Limit)
	if err != nil {
		return nil, err
	}
	if q.NoKey && q.Key != "" {
		return nil, inputErr("key", "must be empty with NoKey")
	}
	extra := `NULL::bytea, NULL::jsonb`
	if q.WithPayload {
		extra = `payload, headers`
	}
	rows, err := r.db.Query(ctx, `SELECT seq, xid::text, id, event_type, coalesce(aggregate_type, ''), coalesce(aggregate_id, ''),
			coalesce(partition_key, ''), coalesce(idempotency_key, ''), coalesce(content_type, ''), coalesce(key, ''),
			coalesce(octet_length(payload), 0), created_at, parked_at, coalesce(error_code, ''), coalesce(error, ''), `+extra+`
		FROM `+r.names.Log(sqlname.SuffixParked)+`
		WHERE grp = $1 AND ($2 = '' AND NOT $5 OR key = $2) AND seq > $3 ORDER BY seq LIMIT $4`,
		group, q.Key, q.AfterSeq, limit, q.NoKey)
	if err != nil {
		return nil, errtext.Wrap(err, "admin: parked events of group %q in %s", group, r.names.Table)
	}
	var e ParkedEvent
	var xid string
	out, err := pgx.AppendRows([]ParkedEvent(nil), rows, func(row pgx.CollectableRow) (ParkedEvent, error) {
		e = ParkedEvent{}
		err := row.Scan(&e.Seq, &xid, &e.ID, &e.Type, &e.AggregateType, &e.AggregateID, &e.PartitionKey, &e.IdempotencyKey,
			&e.ContentType, &e.Key, &e.PayloadSize, &e.CreatedAt, &e.ParkedAt, &e.ErrorCode, &e.Error, &e.Payload, &e.Headers)
		if err == nil {
			e.Xid, err = strconv.ParseUint(xid, 10, 64)
		}
		return e, err
	})
	if err != nil {
		return nil, errtext.Wrap(err, "admin: parked events of group %q in %s", group, r.names.Table)
	}
	return out, r.groupExists(ctx, "parked events", group, len(out))
}

// MaintainResult is what [Relay.Maintain] did.
type MaintainResult struct {
	// Truncated is how many retired parts were emptied; Busy how many
	// another session held (skipped, not waited for).
	Truncated int `json:"truncated"`
	Busy      int `json:"busy"`
	// Dropped is how many empty retired parts were detached and dropped;
	// Waiting how many are left (the role does not own the log).
	Dropped int `json:"dropped"`
	Waiting int `json:"waiting"`
	// TicksDeleted is how many ticks below every group's cursor were
	// deleted.
	TicksDeleted int64 `json:"ticks_deleted"`
	// Owner says the role owns the log.
	Owner bool `json:"owner"`
	// PartsAdded is how many parts were attached ahead of the current
	// transaction id (the log refuses inserts past its last part).
	PartsAdded int `json:"parts_added,omitempty"`
}

// Maintain keeps the log's parts ahead of the current transaction id as
// the relay's ticker does (at least 16 parts from the current one's, the
// missing ones added through <log>_part_add), then runs one retention
// pass of the log now, as the relay's retention service does on the
// replica holding the ticker's lease: it truncates the parts every group is past (a part another session
// holds is skipped, without waiting), deletes the ticks below every
// group's cursor tick and, when the role owns the log, detaches
// (CONCURRENTLY) and drops the emptied parts. db must not be a
// transaction: DETACH CONCURRENTLY cannot run in one. With no group,
// nothing is retired.
func (r *Relay) Maintain(ctx context.Context) (MaintainResult, error) {
	if _, ok := r.db.(pgx.Tx); ok {
		return MaintainResult{}, inputErr("db", "is a transaction: Maintain detaches parts CONCURRENTLY, which cannot run in one")
	}
	added, _, err := r.store.AddParts(ctx)
	if err != nil {
		return MaintainResult{}, errtext.Wrap(err, "admin: maintain %s", r.names.Table)
	}
	s, err := retention.New(retention.Config{DB: r.db, Log: r.names.Table})
	if err != nil {
		return MaintainResult{}, err
	}
	p, err := s.Pass(ctx)
	return MaintainResult{Truncated: p.Truncated, Busy: p.Busy, Dropped: p.Dropped, Waiting: p.Waiting,
		TicksDeleted: p.TicksDeleted, Owner: p.Owner, PartsAdded: added}, errtext.Wrap(err, "admin: maintain %s", r.names.Table)
}
