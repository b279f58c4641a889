package emitter

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// COPY takes over from the INSERT for batches of at least copyMinEvents
// events or copyMinPayloadBytes bytes of payload, when no event has a delay.
// BenchmarkInsertVsCopy measured COPY about 2x faster at 10,000 events, and
// no clear winner at 1,000, where COPY would cost a third round trip on a
// cold statement cache (pgx describes the table first); the INSERT is as
// fast or faster below that. See docs/emitting.md. COPY also streams, so it is not bound by PostgreSQL's
// 1 GiB limit on one message, which the INSERT's payload array is.
const (
	copyMinEvents       = 5000
	copyMinPayloadBytes = 64 << 20
)

// copyColumns are the columns COPY fills. next_attempt_at is left to its
// default, the database's now(), which is why COPY serves only batches
// without delays.
var copyColumns = []string{"id", "event_type", "aggregate_type", "aggregate_id",
	"partition_key", "idempotency_key", "content_type", "payload", "headers"}

// useCopy reports whether the batch should go by COPY.
func (c *columns) useCopy() bool {
	if c.hasDelay {
		return false
	}
	return len(c.ids) >= copyMinEvents || c.payloadBytes >= copyMinPayloadBytes
}

// sendCopy writes the columns with COPY, then (when notify) notifies.
// notifyTimeout bounds the notify sent after a COPY, which runs even when
// the caller's ctx ended during the COPY.
const notifyTimeout = 5 * time.Second

func (e *Emitter) sendCopy(ctx context.Context, tx pgx.Tx, c *columns, notify bool) error {
	src := pgx.CopyFromSlice(len(c.ids), func(i int) ([]any, error) {
		return []any{c.idArgs[i], c.types[i], nullable(c.aggTypes[i]), nullable(c.aggIDs[i]),
			nullable(c.partitionKeys[i]), nullable(c.idemKeys[i]), nullable(c.contentTypes[i]),
			c.payloads[i], c.headers[i]}, nil
	})
	n, err := tx.CopyFrom(ctx, e.copyTable, copyColumns, src)
	if err == nil && n != int64(len(c.ids)) {
		err = fmt.Errorf("copied %d rows, want %d", n, len(c.ids))
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
		return e.sendError(err, c.callerIDs)
	}
	return nil
}

// nullable returns nil for an empty string, so that COPY stores NULL.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}
