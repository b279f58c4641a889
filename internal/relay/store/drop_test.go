package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/relay/batch"
	"github.com/pgoutbox/pgoutbox/internal/relay/store"
	"github.com/pgoutbox/pgoutbox/internal/sqlname"
)

// heldCommits is a store.DB whose transactions, once asked to commit,
// say so on committing and wait for release before they commit.
type heldCommits struct {
	store.DB
	committing chan struct{}
	release    chan struct{}
}

func (d heldCommits) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := d.DB.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return heldTx{Tx: tx, d: d}, nil
}

type heldTx struct {
	pgx.Tx
	d heldCommits
}

func (t heldTx) Commit(ctx context.Context) error {
	close(t.d.committing)
	<-t.d.release
	return t.Tx.Commit(ctx)
}

// TestDropGroupDuringAMoveThatParks: a reader's cursor move that parks a
// key has updated the cursor row and written its parked rows but not
// committed when an operator drops the group. The drop waits for the
// cursor row; once the move commits, the drop must delete its parked
// rows too: else they outlive the group, and a group created again under
// that name starts with the key parked (its events parked on sight).
func TestDropGroupDuringAMoveThatParks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	cur, token := e.group(t, "g")
	emit(t, e.db.Pool, "k", 1)
	e.tick(t)
	b, _, err := e.firstPiece(t, token, cur, 10)
	require.NoError(t, err)
	require.Len(t, b.Events, 1)

	held := heldCommits{DB: e.db.Pool, committing: make(chan struct{}), release: make(chan struct{})}
	mover, err := store.New(held, e.store.Names().Table)
	require.NoError(t, err)
	moved := make(chan error, 1)
	go func() {
		_, err := mover.Move(ctx, token, cur, b, []batch.Parked{{Event: b.Events[0], Key: "k", Code: "permanent", Err: "refused"}},
			[]store.ParkedKey{{Key: "k", Code: "permanent", Err: "refused"}})
		moved <- err
	}()
	select {
	case <-held.committing:
	case err := <-moved:
		t.Fatalf("the move ended before its commit: %v", err)
	}

	dropped := make(chan error, 1)
	go func() { dropped <- e.store.DropGroup(ctx, "g") }()
	cursors := e.store.Names().Log(sqlname.SuffixCursors)
	require.Eventually(t, func() bool {
		var n int
		err := e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND position($1 in query) > 0`, cursors).Scan(&n)
		return err == nil && n > 0
	}, time.Minute, 5*time.Millisecond, "the drop waits for the move's cursor row")
	close(held.release)
	require.NoError(t, <-moved)
	require.NoError(t, <-dropped)

	var events, keys int
	require.NoError(t, e.db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+logName+`_parked WHERE grp = 'g'),
		(SELECT count(*) FROM `+logName+`_parked_keys WHERE grp = 'g')`).Scan(&events, &keys))
	require.Zero(t, events, "parked events of the dropped group")
	require.Zero(t, keys, "parked keys of the dropped group")

	require.NoError(t, e.store.CreateGroup(ctx, "g", store.Latest))
	parked, err := e.store.ParkedKeys(ctx, "g")
	require.NoError(t, err)
	require.Empty(t, parked, "a group created again starts with no key parked")
}
