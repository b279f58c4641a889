package store

import (
	"context"
	"fmt"
	"strconv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/relay/batch"
)

// Stream is one batch's events read once, in seq order, by one events
// statement without a limit, and handed out in pieces (Next). The
// statement holds a pool connection, and its snapshot, until the last
// row is read or Close is called. A Stream is used by one goroutine at
// a time.
type Stream struct {
	// From and To are the batch's cursor and target ticks; AfterSeq is
	// the seq the stream starts after (the cursor's batch_seq, or 0).
	From, To batch.Tick
	AfterSeq int64

	group  string
	rows   pgx.Rows
	cancel context.CancelFunc
	last   int64        // the seq of the last event Next returned (AfterSeq before)
	peek   *batch.Event // a row read past the last piece
	ended  bool         // every row was read (or an error ended the read)
}

// Stream opens the group's next batch from the cursor cur as a stream:
// the target is cur.BatchTick for an open batch, else the newest tick
// within span events of the cursor tick (at least the next), recorded as
// the cursor's batch_tick (ErrLeaseLost when token no longer holds the
// group where cur says); then the events statement runs without a limit
// from cur.BatchSeq on. ok is false when
// there is no tick after the cursor's. ErrSnapshotBackwards or
// ErrDatabaseChanged when the ticks went backwards. The caller must
// Close the stream (ctx's end ends its read, too).
func (s *Store) Stream(ctx context.Context, token uuid.UUID, cur batch.Cursor, span int) (*Stream, bool, error) {
	c, t, err := s.streamTicks(ctx, cur, span)
	if err != nil || t.ID == 0 {
		return nil, false, err
	}
	if cur.BatchTick == 0 {
		tag, err := s.db.Exec(ctx, s.sql.openBatch, cur.Group, token.String(), c.ID, t.ID)
		if err != nil {
			return nil, false, errtext.Wrap(err, "open batch of %q", cur.Group)
		}
		if tag.RowsAffected() == 0 {
			return nil, false, ErrLeaseLost
		}
	}
	st, err := s.openStream(ctx, cur, c, t)
	return st, err == nil, err
}

// ReadStream is Stream without recording the target: the read ahead of a
// reader whose cursor will be cur once the batch it publishes moves
// (Next predicts it). Pass st.Batch() as the Ahead of that move, which
// records its target.
func (s *Store) ReadStream(ctx context.Context, cur batch.Cursor, span int) (*Stream, bool, error) {
	c, t, err := s.streamTicks(ctx, cur, span)
	if err != nil || t.ID == 0 {
		return nil, false, err
	}
	st, err := s.openStream(ctx, cur, c, t)
	return st, err == nil, err
}

// streamTicks reads and checks the cursor and target ticks of a stream
// from cur.
func (s *Store) streamTicks(ctx context.Context, cur batch.Cursor, span int) (c, t batch.Tick, err error) {
	if span < 1 {
		return c, t, fmt.Errorf("pgoutbox: stream batch: span %d, want at least 1", span)
	}
	return s.checkedTicks(ctx, cur.LastTick, cur.BatchTick, span)
}

// openStream runs the events statement of c → t after cur.BatchSeq,
// without a limit, on a context of the stream's own (Close cancels it).
func (s *Store) openStream(ctx context.Context, cur batch.Cursor, c, t batch.Tick) (*Stream, error) {
	sc, err := parseSnapshot(c.Snapshot)
	if err != nil {
		return nil, err
	}
	st, err := parseSnapshot(t.Snapshot)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	rows, err := s.db.Query(sctx, s.sql.stream, strconv.FormatUint(sc.xmax, 10), strconv.FormatUint(st.xmax, 10),
		xidTexts(done(sc, st)), t.Snapshot, c.Snapshot, cur.BatchSeq)
	if err != nil {
		cancel()
		return nil, errtext.Wrap(err, "stream batch of %q", cur.Group)
	}
	return &Stream{From: c, To: t, AfterSeq: cur.BatchSeq, group: cur.Group, rows: rows, cancel: cancel, last: cur.BatchSeq}, nil
}

// Batch is the stream's batch without events: what Outcome.Ahead takes
// to record the target of a stream read ahead.
func (st *Stream) Batch() batch.Batch {
	return batch.Batch{From: st.From, To: st.To, AfterSeq: st.AfterSeq}
}

// Next returns the stream's next piece: its next events, at most n, as
// a batch to move (Move, MoveWith) after the piece before it. The piece
// is Partial when more events follow it; the last piece (possibly
// empty) is not, and its move moves the cursor to To. After the last
// piece the connection is released. An error ends the stream (Close it;
// the cursor stays where the last move left it).
func (st *Stream) Next(n int) (batch.Batch, error) {
	if n < 1 {
		return batch.Batch{}, fmt.Errorf("pgoutbox: stream batch: piece of %d, want at least 1", n)
	}
	if st.ended && st.peek == nil {
		return batch.Batch{}, fmt.Errorf("pgoutbox: stream batch of %q: read past its end", st.group)
	}
	b := batch.Batch{From: st.From, To: st.To, AfterSeq: st.last}
	b.Events = make([]batch.Event, 0, min(n+1, 4096))
	if st.peek != nil {
		b.Events = append(b.Events, *st.peek)
		st.peek = nil
	}
	for len(b.Events) <= n && !st.ended {
		e, ok, err := st.read()
		if err != nil {
			return batch.Batch{}, errtext.Wrap(err, "stream batch of %q", st.group)
		}
		if ok {
			b.Events = append(b.Events, e)
		}
	}
	if len(b.Events) > n {
		p := b.Events[n]
		st.peek = &p
		b.Events = b.Events[:n:n]
		b.Partial = true
	}
	if len(b.Events) > 0 {
		st.last = b.Events[len(b.Events)-1].Seq
	}
	return b, nil
}

// read reads one row; ok is false at the end, where the rows are closed
// (the connection goes back to the pool).
func (st *Stream) read() (batch.Event, bool, error) {
	if st.rows.Next() {
		e, err := scanEvent(st.rows)
		if err != nil {
			st.end()
		}
		return e, err == nil, err
	}
	st.end()
	return batch.Event{}, false, st.rows.Err()
}

// end closes the rows: at their end this returns the connection to the
// pool as it is.
func (st *Stream) end() {
	st.ended = true
	st.rows.Close()
}

// Close ends the stream. A stream not read to its end is cancelled
// first, so that closing it reads no more rows: the connection is then
// dropped, not reused. Close may be called more than once.
func (st *Stream) Close() {
	if st == nil {
		return
	}
	if !st.ended {
		st.cancel()
		st.end()
	}
	st.peek = nil
	st.cancel()
}
