package lease_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/lease"
)

// deadLetter inserts a dead letter with id, as an event emitted earlier
// with that id and dead since would have left.
func deadLetter(t *testing.T, e env, id uuid.UUID) {
	t.Helper()
	_, err := e.db.Pool.Exec(t.Context(), `INSERT INTO outbox_events_dead (id, seq, event_type, status, failed_at, last_error_code)
		VALUES ($1, 999999, 'old', 'FAILED', now(), 'old_code')`, id)
	require.NoError(t, err)
}

// deadCode returns the event type and error code of the dead letter id.
func deadCode(t *testing.T, e env, id uuid.UUID) (string, string) {
	t.Helper()
	var typ, code string
	require.NoError(t, e.db.Pool.QueryRow(t.Context(), `SELECT event_type, last_error_code FROM outbox_events_dead WHERE id = $1`, id).
		Scan(&typ, &code))
	return typ, code
}

// An event emitted with the id of a dead letter (a caller's own id) that
// fails for good replaces that dead letter: the final failure does not
// fail its batch, whose other outcomes are recorded.
func TestFinalFailureOfAReusedDeadIDReplacesTheDeadLetter(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	ids := insert(t, e.db.Pool, spec{Type: "new"}, spec{Type: "new"})
	deadLetter(t, e, ids[0])
	b, err := e.store.Claim(ctx, e.db.Pool, lease.ClaimParams{Owner: "w", Limit: 2, Lease: time.Hour, Start: 2})
	require.NoError(t, err)
	var fails []lease.Failure
	var sent []lease.Ref
	for _, r := range b.Refs() {
		if r.ID == ids[0] {
			fails = append(fails, lease.Failure{Ref: r, Code: "handler_error", Message: "m", Final: true})
		} else {
			sent = append(sent, r)
		}
	}
	_, err = e.store.Complete(ctx, e.db.Pool, lease.CompleteParams{Sent: sent, Failed: fails})
	require.NoError(t, err)
	typ, code := deadCode(t, e, ids[0])
	require.Equal(t, "new", typ)
	require.Equal(t, "handler_error", code)
	require.Equal(t, "outbox_events_sent", tableOf(t, e.db.Pool, ids[1]))
}

// A recovery that makes such an event FAILED replaces the dead letter
// too, and recovers the other expired leases of its pass: a refused move
// would fail every pass, since the oldest lease leads each one.
func TestRecoveryOfAReusedDeadIDReplacesTheDeadLetter(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	ids := insert(t, e.db.Pool, spec{Type: "new"}, spec{Type: "new"})
	deadLetter(t, e, ids[0])
	_, err := e.store.Claim(ctx, e.db.Pool, lease.ClaimParams{Owner: "w", Limit: 2, Lease: time.Hour, Start: 2})
	require.NoError(t, err)
	_, err = e.db.Pool.Exec(ctx, `UPDATE outbox_events SET lease_until = now() - interval '1s'`)
	require.NoError(t, err)
	res, err := e.store.Recover(ctx, e.db.Pool, lease.RecoverParams{Limit: 100, AtMostOnce: true})
	require.NoError(t, err)
	require.Len(t, res.Failed, 2)
	typ, code := deadCode(t, e, ids[0])
	require.Equal(t, "new", typ)
	require.Equal(t, "worker_lost", code)
}

// A success recorded in the history for an id that is also a dead letter
// (the event was emitted again with a dead letter's id) is read back as
// recorded after a lost reply, not as lost: Outcomes takes the row that
// shows the claim's outcome, not the first table it finds the id in.
func TestOutcomesFindTheSuccessBehindADeadLetterOfTheSameID(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	ids := insert(t, e.db.Pool, spec{Type: "new"})
	deadLetter(t, e, ids[0])
	b, err := e.store.Claim(ctx, e.db.Pool, lease.ClaimParams{Owner: "w", Limit: 1, Lease: time.Hour, Start: 1})
	require.NoError(t, err)
	p := lease.CompleteParams{Sent: b.Refs()}
	_, err = e.store.Complete(ctx, e.db.Pool, p)
	require.NoError(t, err)
	res, unknown, err := e.store.Outcomes(ctx, e.db.Pool, p)
	require.NoError(t, err)
	require.Empty(t, unknown)
	require.Empty(t, res.Lost)
	require.Equal(t, []uuid.UUID{ids[0]}, res.Sent)
}
