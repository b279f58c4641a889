package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/relay/batch"
)

// Next returns the cursor that moving b from cur gives: b's target when
// b is whole, else cur's tick with b's target and last seq as the open
// batch.
func Next(cur batch.Cursor, b batch.Batch) batch.Cursor {
	if b.Partial && len(b.Events) > 0 {
		return batch.Cursor{Group: cur.Group, LastTick: cur.LastTick, BatchTick: b.To.ID, BatchSeq: b.Events[len(b.Events)-1].Seq}
	}
	return batch.Cursor{Group: cur.Group, LastTick: b.To.ID}
}

// scanEvent reads a row of the events statement (and of parkedEvents).
func scanEvent(row pgx.CollectableRow) (batch.Event, error) {
	var e batch.Event
	var xid, id, headers string
	err := row.Scan(&e.Seq, &xid, &id, &e.Event.Type, &e.Event.AggregateType, &e.Event.AggregateID,
		&e.Event.PartitionKey, &e.Event.IdempotencyKey, &e.Event.ContentType, &headers, &e.Event.Payload, &e.Event.CreatedAt)
	if err != nil {
		return e, err
	}
	if e.Xid, err = strconv.ParseUint(xid, 10, 64); err != nil {
		return e, err
	}
	if e.Event.ID, err = uuid.Parse(id); err != nil {
		return e, err
	}
	e.Event.Headers = decodeHeaders(headers)
	return e, nil
}

// decodeHeaders reads the headers column: an object of strings as Emit
// writes it; other JSON values are kept as their JSON text; anything but
// an object gives no headers.
func decodeHeaders(raw string) map[string]string {
	if raw == "{}" {
		return nil
	}
	var vals map[string]json.RawMessage
	if json.Unmarshal([]byte(raw), &vals) != nil || len(vals) == 0 {
		return nil
	}
	out := make(map[string]string, len(vals))
	for k, v := range vals {
		var str string
		if json.Unmarshal(v, &str) != nil {
			str = string(v)
		}
		out[k] = str
	}
	return out
}

// Move records that every event of b was published or parked: the
// cursor moves to b.To, or, for a partial batch, records b.To and the
// last seq of b as the open batch (see Next). parked events and newKeys
// are written in the same transaction. The move matches token, an
// unexpired lease and the position b was read from (cur's tick, b's
// target and b.AfterSeq); ErrLeaseLost and nothing written otherwise. It
// returns the new cursor.
func (s *Store) Move(ctx context.Context, token uuid.UUID, cur batch.Cursor, b batch.Batch, parked []batch.Parked, newKeys []ParkedKey) (batch.Cursor, error) {
	return s.MoveWith(ctx, token, cur, b, Outcome{Parked: parked, NewKeys: newKeys})
}

// Outcome is what a cursor move writes besides the cursor, in the move's
// transaction.
type Outcome struct {
	// Parked and NewKeys are the events and keys the batch parked.
	Parked  []batch.Parked
	NewKeys []ParkedKey
	// Ahead, when its To.ID is not 0, is a batch read ahead from
	// Next(cur, b) (the Batch of a ReadStream), recorded as the open
	// batch: a restart then resumes exactly it. An Ahead that continues
	// a partial b (same target) records nothing more: its target is b's.
	Ahead batch.Batch
	// Unpark is the keys whose replay or skip request the move carries
	// out: their parked events and key rows are deleted before Parked
	// and NewKeys are written (a replayed key that failed again is
	// parked anew, with its new error).
	Unpark []string
	// Clear is the keys whose requests are cleared and nothing else: the
	// keys the reader had not parked.
	Clear []string
}

// execer runs a statement: the DB, or a transaction on it.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// cursorOnly says o writes nothing but the cursor: the move is then one
// statement, without a transaction of its own.
func (o Outcome) cursorOnly() bool {
	return len(o.Parked) == 0 && len(o.NewKeys) == 0 && len(o.Unpark) == 0 && len(o.Clear) == 0
}

// MoveWith is Move with everything a move may write (Outcome).
func (s *Store) MoveWith(ctx context.Context, token uuid.UUID, cur batch.Cursor, b batch.Batch, o Outcome) (batch.Cursor, error) {
	next := Next(cur, b)
	switch {
	case o.Ahead.To.ID == 0 || next.BatchTick != 0:
	case o.Ahead.From.ID != next.LastTick || o.Ahead.AfterSeq != 0:
		return cur, fmt.Errorf("pgoutbox: move cursor of %q: the batch read ahead is from tick %d, not %d", cur.Group, o.Ahead.From.ID, next.LastTick)
	default:
		next.BatchTick = o.Ahead.To.ID
	}
	var batchTick, batchSeq *int64
	if next.BatchTick != 0 {
		batchTick = &next.BatchTick
	}
	if next.BatchSeq != 0 {
		batchSeq = &next.BatchSeq
	}
	move := func(db execer) error {
		tag, err := db.Exec(ctx, s.sql.move, cur.Group, token.String(), cur.LastTick, b.To.ID,
			next.LastTick, batchTick, batchSeq, b.AfterSeq)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrLeaseLost
		}
		return nil
	}
	var err error
	if o.cursorOnly() { // one statement, one round trip
		err = move(s.db)
	} else {
		err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
			if err := move(tx); err != nil {
				return err
			}
			return s.writeOutcome(ctx, tx, cur.Group, o)
		})
	}
	if errors.Is(err, ErrLeaseLost) {
		return cur, ErrLeaseLost
	}
	if err != nil {
		return cur, errtext.Wrap(err, "move cursor of %q", cur.Group)
	}
	return next, nil
}

// writeOutcome writes o's parked rows, after deleting those of the keys
// it unparks, in tx.
func (s *Store) writeOutcome(ctx context.Context, tx pgx.Tx, group string, o Outcome) error {
	if err := s.unpark(ctx, tx, group, o.Unpark, o.Clear); err != nil {
		return err
	}
	if err := s.park(ctx, tx, group, o.Parked); err != nil {
		return err
	}
	return s.parkKeys(ctx, tx, group, o.NewKeys)
}

// park inserts the parked events in one statement.
func (s *Store) park(ctx context.Context, tx pgx.Tx, group string, parked []batch.Parked) error {
	if len(parked) == 0 {
		return nil
	}
	n := len(parked)
	seqs := make([]int64, n)
	xids, ids, types, aggTypes, aggIDs, pkeys, ikeys, ctypes := make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	payloads, headers := make([][]byte, n), make([]string, n)
	created := make([]time.Time, n)
	keys, codes, errs := make([]string, n), make([]string, n), make([]string, n)
	for i, p := range parked {
		e := p.Event.Event
		seqs[i], xids[i], ids[i] = p.Event.Seq, strconv.FormatUint(p.Event.Xid, 10), e.ID.String()
		types[i], aggTypes[i], aggIDs[i], pkeys[i] = e.Type, e.AggregateType, e.AggregateID, e.PartitionKey
		ikeys[i], ctypes[i], payloads[i] = e.IdempotencyKey, e.ContentType, e.Payload
		h, err := json.Marshal(e.Headers)
		if err != nil {
			return err
		}
		if e.Headers == nil {
			h = []byte("{}")
		}
		headers[i], created[i] = string(h), e.CreatedAt
		keys[i], codes[i], errs[i] = p.Key, p.Code, p.Err
	}
	_, err := tx.Exec(ctx, s.sql.park, group, seqs, xids, ids, types, aggTypes, aggIDs, pkeys, ikeys, ctypes,
		payloads, headers, created, keys, codes, errs)
	return err
}

// parkKeys inserts the newly parked keys in one statement.
func (s *Store) parkKeys(ctx context.Context, tx pgx.Tx, group string, newKeys []ParkedKey) error {
	if len(newKeys) == 0 {
		return nil
	}
	keys, codes, errs := make([]string, len(newKeys)), make([]string, len(newKeys)), make([]string, len(newKeys))
	for i, k := range newKeys {
		keys[i], codes[i], errs[i] = k.Key, k.Code, k.Err
	}
	_, err := tx.Exec(ctx, s.sql.parkKeys, group, keys, codes, errs)
	return err
}
