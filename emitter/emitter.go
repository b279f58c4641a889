package emitter

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Emitter writes events into one outbox table (or one log, Config.Kind)
// inside transactions its caller owns. It holds no connection and starts no goroutine; it is safe for
// concurrent use and cheap to keep for the life of the program.
type Emitter struct {
	cfg        Config
	names      sqlname.Names
	insertSQL  string // a call's events from arrays
	insertOne  string // a call's one event as a VALUES row
	copyTable  pgx.Identifier
	notifySQL  string
	notifyArgs []any
	throttle   notifyThrottle

	instruments // metrics.go, trace.go
}

// New returns an Emitter for cfg after applying the defaults documented on
// Config. An out-of-range value or an invalid table name gives an
// *outbox.ConfigError naming the field.
func New(cfg Config) (*Emitter, error) {
	cfg = cfg.withDefaults()
	names, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	e := &Emitter{
		cfg:       cfg,
		names:     names,
		insertSQL: insertSQL(names.Qualified),
		insertOne: insertOneSQL(names.Qualified),
		copyTable: pgx.Identifier{cfg.Table.Schema, cfg.Table.Name},
	}
	if cfg.Kind == outbox.KindLog {
		e.insertSQL = insertLogSQL(names.Qualified)
		e.insertOne = insertOneLogSQL(names.Qualified)
	}
	if !cfg.DisableNotify && cfg.Kind == outbox.KindOutbox {
		e.notifySQL = notifySQL
		e.notifyArgs = []any{names.Channel()}
	}
	e.instruments = newInstruments(cfg)
	return e, nil
}

// Emit writes events into the outbox table inside tx and returns their IDs,
// in the order of events: the caller's ID where set, else a fresh UUIDv7.
// The rows become visible to dispatchers when tx commits, and vanish if it
// rolls back; Emit never commits or rolls back tx. Unless notify is
// disabled, Emit also queues one pg_notify on the table's channel, which
// PostgreSQL delivers only at commit, when NotifyInterval has passed since
// the last Emit of this Emitter that did.
//
// All events are validated before anything is sent. An invalid event gives
// an *outbox.ValidationError (errors.Is [outbox.ErrInvalidEvent]); a nil,
// finished or aborted tx an *outbox.InputError naming "tx" (errors.Is
// [outbox.ErrTxDone] and [outbox.ErrInvalidInput], not ErrInvalidEvent).
// Nothing is written and an open tx is still usable. A ctx that is already done gives
// its error (errors.Is ctx.Err()) with the same guarantee: nothing is sent
// and tx is unchanged. Emit with no events returns nil, nil and sends
// nothing.
//
// When ctx carries an OpenTelemetry span, each event also gets the W3C
// "traceparent" (and "tracestate") headers of that span, unless it carries
// a traceparent of its own or trace propagation is disabled; publishers pass
// them on, so a consumer's span can link back to the business transaction.
// They are added after validation and do not count against the header
// limits. The caller's events and maps are not modified.
//
// The insert and the notify travel in one round trip (two the first time a
// connection runs them, to prepare the statements). Batches of 500 events
// or more (or 1 MiB of payload) go by COPY instead, which is faster there,
// streams and takes two or three round trips (one more when an event has a
// Delay: COPY reads the transaction's now() first). A
// caller-set ID already in the table gives an error matching
// [outbox.ErrDuplicateID] that names the ID; a missing table one matching
// [outbox.ErrMissingTable] that says how to create it. Any
// other error comes from PostgreSQL or the connection, including a ctx that
// ends while the statement runs (pgx cancels the statement or closes the
// connection): tx is then aborted, its Commit fails, and only a rollback
// remains. (A ctx that ends after a COPY went through does not stop the
// notify that follows it: Emit then succeeds.)
func (e *Emitter) Emit(ctx context.Context, tx pgx.Tx, events ...outbox.Event) ([]uuid.UUID, error) {
	if pgerr.IsNil(tx) {
		return nil, pgerr.TxError("is nil", nil)
	}
	if len(events) == 0 {
		return nil, nil
	}
	cols, err := e.prepare(events)
	if err != nil {
		return nil, err
	}
	ctx, span := e.startSpan(ctx, events, cols.ids)
	err = e.traceAndWrite(ctx, tx, cols)
	endSpan(span, err)
	if err != nil {
		return nil, err
	}
	e.countEmitted(events)
	return cols.ids, nil
}

// traceAndWrite adds the trace headers to the prepared columns and
// writes them.
func (e *Emitter) traceAndWrite(ctx context.Context, tx pgx.Tx, cols *columns) error {
	if !e.cfg.DisableTracePropagation {
		if th := traceHeaders(ctx); th != nil {
			cols.addTrace(th)
		}
	}
	if err := ctx.Err(); err != nil {
		return errtext.Wrap(err, "emit: context is done; nothing was sent and tx is unchanged")
	}
	return e.write(ctx, tx, cols)
}

// write sends the columns with COPY when the batch is large (delayed
// events included: sendCopy computes their due times as the INSERT does),
// else with the INSERT; then it notifies, when notify
// is on and NotifyInterval has passed for tx's database. A call that took
// the interval's notify and failed gives it back.
func (e *Emitter) write(ctx context.Context, tx pgx.Tx, c *columns) error {
	notify, undo := e.notifyNow(tx)
	var err error
	if c.useCopy() {
		err = e.sendCopy(ctx, tx, c, notify)
	} else {
		err = e.send(ctx, tx, c, notify)
	}
	if err != nil && undo != nil {
		undo()
	}
	return err
}

// notifyNow reports whether this call notifies, and how to give the
// notify back.
func (e *Emitter) notifyNow(tx pgx.Tx) (bool, func()) {
	switch {
	case e.notifySQL == "":
		return false, nil
	case e.cfg.NotifyEveryEmit:
		return true, nil
	}
	return e.throttle.take(databaseOf(tx), e.cfg.NotifyInterval)
}

// notifyThrottle lets one Emit call per interval notify, for each database
// (an Emitter, like the package-level Emit, may write to several). Time is
// measured on the monotonic clock, so a wall-clock step cannot silence it.
type notifyThrottle struct {
	once sync.Once
	born time.Time
	last sync.Map // database key -> *atomic.Int64: nanoseconds after born of the last notify
}

// take claims the notify of key's current interval: of concurrent calls,
// one gets true and an undo that returns it.
func (t *notifyThrottle) take(key string, interval time.Duration) (bool, func()) {
	t.once.Do(func() { t.born = time.Now() })
	now := int64(time.Since(t.born))
	v, ok := t.last.Load(key)
	if !ok {
		fresh := &atomic.Int64{}
		fresh.Store(math.MinInt64 / 2) // long ago: the first call notifies
		v, _ = t.last.LoadOrStore(key, fresh)
	}
	last := v.(*atomic.Int64)
	prev := last.Load()
	if now-prev < int64(interval) || !last.CompareAndSwap(prev, now) {
		return false, nil
	}
	return true, func() { last.CompareAndSwap(now, prev) }
}

// databaseOf names the database tx writes to: host, port and database of
// its connection.
func databaseOf(tx pgx.Tx) string {
	conn := tx.Conn()
	if conn == nil {
		return ""
	}
	cfg := conn.Config()
	return cfg.Host + ":" + strconv.Itoa(int(cfg.Port)) + "/" + cfg.Database
}

// send runs the insert and (when notify) the notify in one round trip:
// one event as a VALUES row, more from the arrays.
func (e *Emitter) send(ctx context.Context, tx pgx.Tx, c *columns, notify bool) error {
	noDelay := e.cfg.Kind == outbox.KindLog
	if c.single() {
		return e.exec(ctx, tx, c, notify, e.insertOne, c.rowArgs(noDelay))
	}
	return e.exec(ctx, tx, c, notify, e.insertSQL, c.arrayArgs(noDelay))
}

// exec runs sql with args, and the notify, and checks that every event's
// row went in.
func (e *Emitter) exec(ctx context.Context, tx pgx.Tx, c *columns, notify bool, sql string, args []any) error {
	var tag pgconn.CommandTag
	var err error
	if notify {
		tag, err = e.insertAndNotify(ctx, tx, sql, args)
	} else {
		tag, err = tx.Exec(ctx, sql, args...)
	}
	if err == nil && tag.RowsAffected() != int64(len(c.ids)) {
		err = fmt.Errorf("inserted %d rows, want %d", tag.RowsAffected(), len(c.ids))
	}
	if err != nil {
		return e.sendError(err, callerIDs(c.events, c.ids))
	}
	return nil
}

// insertAndNotify sends the insert and the notify in one batch and
// returns the insert's tag.
func (e *Emitter) insertAndNotify(ctx context.Context, tx pgx.Tx, sql string, args []any) (pgconn.CommandTag, error) {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	b.Queue(e.notifySQL, e.notifyArgs...)
	br := tx.SendBatch(ctx, b)
	tag, err := br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	return tag, err
}
