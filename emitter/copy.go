package emitter

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// COPY takes over from the INSERT for batches of at least copyMinEvents
// events or copyMinPayloadBytes bytes of payload, delayed or not.
// BenchmarkInsertVsCopy (rolled-back transactions, PostgreSQL on
// loopback) measures the two even at about 50 events and COPY ahead from
// there: 10% at 100, 15-30% at 1,000, 20-35% at 10,000; in committed
// batches from two writers (go run ./benchmarks -mode emit-batch) COPY
// gave 15% more events/s at 100 and 20-30% at 1,000, into an outbox and
// into a log. COPY costs one round trip more than the INSERT (it waits
// for the server's CopyInResponse), which a real network makes 0.2 to
// 1 ms; the threshold sits at 500 events, where COPY saves about 1 ms of
// server time, so that it pays for that round trip off loopback too. By
// bytes, BenchmarkInsertVsCopyPayload measured the INSERT allocating 5 to
// 8 times the payload (it encodes every payload into one message) and no
// faster than COPY from 1 MiB of payload on, while COPY streams in 64 KiB
// messages and allocates a few hundred bytes per event whatever the
// payload. See docs/emitting.md.
const (
	copyMinEvents       = 500
	copyMinPayloadBytes = 1 << 20
)

// copyColumns are the columns COPY fills when every event is due at once:
// next_attempt_at is left to its default, the database's now().
// copyColumnsDue adds next_attempt_at, for a batch with delays.
var (
	copyColumns = []string{"id", "event_type", "aggregate_type", "aggregate_id",
		"partition_key", "idempotency_key", "content_type", "payload", "headers"}
	copyColumnsDue = append(copyColumns[:len(copyColumns):len(copyColumns)], "next_attempt_at")
)

// nowSQL reads the transaction's now(): its start time, the same for all
// its statements, which the INSERT adds the delays to.
const nowSQL = `SELECT now()`

// useCopy reports whether the batch should go by COPY.
func (c *columns) useCopy() bool {
	return len(c.events) >= copyMinEvents || c.payloadBytes >= copyMinPayloadBytes
}

// notifyTimeout bounds the notify sent after a COPY, which runs even when
// the caller's ctx ended during the COPY.
const notifyTimeout = 5 * time.Second

// sendCopy writes the events with COPY, then (when notify) notifies. A
// batch with delays first reads the transaction's now(), one round trip,
// and sends each event's next_attempt_at as now() + its delay, the value
// the INSERT computes.
func (e *Emitter) sendCopy(ctx context.Context, tx pgx.Tx, c *columns, notify bool) error {
	src := newCopySource(c)
	names := copyColumns
	if c.hasDelay {
		if err := tx.QueryRow(ctx, nowSQL).Scan(&src.now); err != nil {
			return e.sendError(err, nil)
		}
		names = copyColumnsDue
	}
	n, err := tx.CopyFrom(ctx, e.copyTable, names, src)
	if err == nil && n != int64(len(c.events)) {
		err = fmt.Errorf("copied %d rows, want %d", n, len(c.events))
	}
	if err == nil && notify {
		// The rows are in the transaction: a ctx that ended meanwhile
		// must not leave it committable with Emit reporting a failure.
		// The notify is queued until commit and takes no time.
		nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), notifyTimeout)
		_, err = tx.Exec(nctx, e.notifySQL, e.notifyArgs...)
		cancel()
	}
	if err != nil {
		return e.sendError(err, callerIDs(c.events, c.ids))
	}
	return nil
}

// copySource streams the events to pgx's CopyFrom one row at a time. The
// row's values are pointers into one reused copyRow, which pgx encodes
// before it asks for the next row: a row costs no allocation but its
// headers' (pgx takes a JSON value only as a string or a byte slice).
type copySource struct {
	c      *columns
	next   int       // the index of the next event
	now    time.Time // the transaction's now(), when the rows carry next_attempt_at
	row    copyRow
	values []any
	buf    []byte // the current row's headers JSON
}

// copyRow is one row's values in the forms pgx encodes without boxing:
// types whose pointers implement pgtype's valuer interfaces.
type copyRow struct {
	id      pgtype.UUID
	text    [6]pgtype.Text // event_type … content_type; empty is NULL
	payload copyBytes
	due     pgtype.Timestamptz
}

// copyBytes is a bytea value; nil is NULL.
type copyBytes struct{ b []byte }

// BytesValue returns the bytes, for pgx.
func (p *copyBytes) BytesValue() ([]byte, error) { return p.b, nil }

// newCopySource returns a source positioned before c's first event.
func newCopySource(c *columns) *copySource {
	s := &copySource{c: c}
	r := &s.row
	s.values = []any{&r.id, &r.text[0], &r.text[1], &r.text[2], &r.text[3], &r.text[4],
		&r.text[5], &r.payload, nil, &r.due}
	return s
}

// Next loads the next event into the row; false after the last.
func (s *copySource) Next() bool {
	if s.next >= len(s.c.events) {
		return false
	}
	i := s.next
	s.next++
	ev, r := &s.c.events[i], &s.row
	r.id = pgtype.UUID{Bytes: s.c.ids[i], Valid: true}
	for j, v := range [...]string{ev.Type, ev.AggregateType, ev.AggregateID, ev.PartitionKey,
		ev.IdempotencyKey, ev.ContentType} {
		r.text[j] = pgtype.Text{String: v, Valid: v != ""}
	}
	r.payload.b = ev.Payload
	r.due = pgtype.Timestamptz{Time: s.now.Add(time.Duration(delayMicros(ev.Delay)) * time.Microsecond), Valid: true}
	s.values[8] = s.headers(ev.Headers)
	return true
}

// headers returns the current row's headers JSON, trace headers added;
// the bytes are valid until the next row.
func (s *copySource) headers(h map[string]string) any {
	th := traceFor(h, s.c.trace)
	if len(h) == 0 && len(th) == 0 {
		return "{}"
	}
	s.buf = appendHeaders(s.buf[:0], h, th)
	return s.buf
}

// Values returns the current row: with next_attempt_at when the batch has
// delays, else without.
func (s *copySource) Values() ([]any, error) {
	if s.c.hasDelay {
		return s.values, nil
	}
	return s.values[:len(copyColumns)], nil
}

// Err reports nothing: the events were validated before.
func (s *copySource) Err() error { return nil }
