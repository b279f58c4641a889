package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/pgerr"
	"github.com/pgoutbox/pgoutbox/internal/testdb"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// renewals is the row change that slowPool makes slow: a renewal moves a
// held row's lease.
const renewals = `NEW.lease_until IS DISTINCT FROM OLD.lease_until`

// slowPool returns a pool acting as a role whose statements end after
// timeout (statement_timeout), on a table where every held row that a
// renewal changes costs perRow (a trigger that sleeps): a renewal of many
// rows always runs out of time, one of few rows fits. Other statements pay
// nothing.
func slowPool(t *testing.T, db *testdb.DB, timeout, perRow time.Duration) *pgxpool.Pool {
	t.Helper()
	role, _ := newGrantedRole(t, db, "pgotest_slowrenew", `
GRANT USAGE ON SCHEMA %[1]s TO %[2]s;
GRANT SELECT, UPDATE, DELETE ON outbox_events TO %[2]s;
GRANT SELECT ON outbox_events_schema_version TO %[2]s;
`+finishedGrants+`;
CREATE FUNCTION renewal_cost() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
	IF OLD.status = 'PROCESSING' AND NEW.status = 'PROCESSING' AND NEW.lock_token = OLD.lock_token
		AND %[4]s THEN
		PERFORM pg_sleep(%[3]f);
	END IF;
	RETURN NEW;
END $f$;
CREATE TRIGGER renewal_cost BEFORE UPDATE ON outbox_events FOR EACH ROW EXECUTE FUNCTION renewal_cost()`,
		perRow.Seconds(), renewals)
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.ConnConfig = db.RoleConnConfig(t, role)
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = fmt.Sprint(timeout.Milliseconds())
	cfg.MaxConns = 4
	return openPool(t, cfg)
}

// A renewal that runs out of time (statement_timeout) is sent again at
// once in smaller statements, within the beat, as claims and completions
// shrink: no lease is lost and no handler runs twice. Here a renewal of the
// 300 held events costs at least 600ms against a 200ms timeout, so every
// full renewal fails; before, the heartbeat reported the error and
// returned, and every lease was lost at its local deadline.
//
// The lease leaves a beat time for the whole shrinking renewal on a loaded
// machine: each row's sleep there costs 2ms plus the time its backend
// waits for a CPU, and the successful renewal redoes every row after about
// log2(300) timeouts of 200ms. With a 6s lease (a beat may take 3s, a
// claim is trusted 4.8s) no renewal succeeded at load 12 on 2 cores (the
// statements shrank to a few rows, then the beat's 3s ran out while the
// 300 rows were renewed in them), and 100 leases were lost: the load, not
// the dispatcher, had made the renewal longer than the lease allowed. At
// 15s a beat may take 7.5s, and a second beat comes before the claim's
// 12s of trust end.
func TestRenewalShrinksUnderAStatementTimeout(t *testing.T) {
	t.Parallel()
	db := testdb.NewMigrated(t)
	const n = 300
	ids := insertEvents(t, db, "x", n)
	pool := slowPool(t, db, 200*time.Millisecond, 2*time.Millisecond)

	errs, calls := &errorLog{}, newCallLog()
	cfg := baseConfig(db)
	cfg.LeaseDuration = 15 * time.Second
	cfg.Concurrency = n
	cfg.OnError = errs.add
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce)
	d, err := dispatcher.New(pool, cfg)
	require.NoError(t, err)
	require.NoError(t, d.Handle("x", func(ctx context.Context, e outbox.Event) error {
		calls.enter(e.ID)
		defer calls.exit(e.ID)
		select {
		case <-release:
			return nil
		case <-ctx.Done(): // the lease was lost locally
			return ctx.Err()
		}
	}))
	runDispatcher(t, d)

	// Hold every handler until each lease was renewed later than a lease
	// duration after its claim (it would have expired without renewals),
	// or until a lease is lost.
	renewedPast := func() bool {
		var short int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_events
			WHERE status <> 'PROCESSING' OR lease_until - locked_at < $1::bigint * interval '1 millisecond'`,
			(2*cfg.LeaseDuration).Milliseconds()).Scan(&short))
		return short == 0
	}
	waitFor(t, "every lease renewed past its first expiry, or one lost", func() bool {
		return len(errs.matching(outbox.ErrLockLost)) > 0 || renewedPast()
	})
	for _, err := range errs.filter(func(err error) bool { return !errors.Is(err, outbox.ErrLockLost) }) {
		t.Log(err)
	}
	require.Empty(t, errs.matching(outbox.ErrLockLost), "no lease lost")
	releaseOnce()
	waitFor(t, "every event SENT", func() bool { return statusCounts(t, db)[outbox.StatusSent] == n })
	for _, id := range ids {
		require.Equal(t, 1, calls.count(id), "the handler of %s ran once", id)
	}
	timedOut := errs.filter(func(err error) bool { return pgerr.Code(err) == pgerr.QueryCanceled })
	require.NotEmpty(t, timedOut, "full renewals ran out of time")
	require.Empty(t, errs.filter(func(err error) bool {
		return !errors.Is(err, context.Canceled) && pgerr.Code(err) != pgerr.QueryCanceled
	}))
}
