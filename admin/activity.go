package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/errtext"
)

// Activity window bounds.
const (
	// MinActivityWindow is the shortest window Activity accepts.
	MinActivityWindow = time.Minute
	// MaxActivityWindow is the longest window Activity accepts.
	MaxActivityWindow = time.Hour
	// ActivityCountLimit is the most events Activity counts one by one
	// for each of Sent, Retried and Failed: past it the count stops
	// there and its Capped field is set.
	ActivityCountLimit = 100_000
)

// Activity is what happened in the outbox in the last Window, and which
// dispatcher replicas hold leases now: the overview of an operator
// console.
type Activity struct {
	// Window is the period counted, ending at At.
	Window time.Duration `json:"window_ns"`
	// Sent is how many events reached SENT in the window (the history's
	// sent_at), up to [ActivityCountLimit].
	Sent int64 `json:"sent"`
	// SentCapped reports that more than ActivityCountLimit events were
	// sent in the window: Sent is then ActivityCountLimit.
	SentCapped bool `json:"sent_capped,omitempty"`
	// Retried is how many attempts ended in a retry in the window: the
	// "retry" entries of the attempt logs, ended in the window, of the
	// events now PENDING or PROCESSING and of those sent or failed in
	// the window, up to ActivityCountLimit events read.
	Retried int64 `json:"retried"`
	// RetriedCapped reports that Retried stopped at ActivityCountLimit
	// events read: it is a lower bound.
	RetriedCapped bool `json:"retried_capped,omitempty"`
	// Failed is how many events reached FAILED in the window (the dead
	// letters' failed_at; a dead letter replayed or purged since is
	// not counted), up to ActivityCountLimit.
	Failed int64 `json:"failed"`
	// FailedCapped reports that Failed is ActivityCountLimit and more
	// events failed.
	FailedCapped bool `json:"failed_capped,omitempty"`
	// Replicas are the lease owners (dispatcher workers' LockOwner)
	// holding PROCESSING rows now, by owner.
	Replicas []Replica `json:"replicas"`
	// At is the database's now() when Activity was read.
	At time.Time `json:"at"`
}

// Replica is one lease owner seen holding PROCESSING rows.
type Replica struct {
	// Owner is the lock_owner the dispatcher writes in the rows it
	// claims.
	Owner string `json:"owner"`
	// Holding is how many PROCESSING rows it holds.
	Holding int64 `json:"holding"`
	// LastHeartbeat is its latest lease renewal among those rows (their
	// claim time when none was renewed yet). A replica whose
	// LastHeartbeat falls behind while it holds rows has stopped
	// renewing: its leases expire and recovery takes them back.
	LastHeartbeat time.Time `json:"last_heartbeat"`
}

// Activity counts the events sent, retried and failed in the last
// window (MinActivityWindow to MaxActivityWindow, by the database
// clock) and lists the lease owners holding PROCESSING rows, in one
// statement, every part through an index and bounded:
//
//   - Sent: the history's partitions that reach into the window
//     (partition pruning), and in them the BRIN index on sent_at (schema
//     version 13), which reads the pages of the window's rows and of
//     every range of 128 pages not summarized yet: the last, partial
//     one, and the full ones summarized since neither by a retention
//     pass (<table>_sent_summarize, each pass of every dispatcher that
//     keeps the history) nor by VACUUM (autosummarize); up to
//     ActivityCountLimit+1 rows.
//   - Failed: the dead letters' time index (failed_at), up to
//     ActivityCountLimit+1 rows.
//   - Retried: the attempt logs of the rows read for Sent and Failed, of
//     the PENDING rows due in the window or later (a retry sets
//     next_attempt_at after its own end; the due index, up to
//     ActivityCountLimit+1 rows) and of the PROCESSING rows.
//   - Replicas: the PROCESSING rows, through the held index: the leases
//     the dispatchers hold, which their configuration bounds.
//
// Bad window gives an [*outbox.InputError] naming "window".
func (a *Admin) Activity(ctx context.Context, window time.Duration) (Activity, error) {
	if window < MinActivityWindow || window > MaxActivityWindow {
		return Activity{}, inputErr("window", "is %s, must be %s to %s", window, MinActivityWindow, MaxActivityWindow)
	}
	act := Activity{Window: window, Replicas: []Replica{}}
	var sent, failed, retried int64
	var capped bool
	var owners []string
	var holding []int64
	var beats []time.Time
	err := a.db.QueryRow(ctx, activitySQL(a.sql.t, a.sql.dead, a.sql.sent, window)).Scan(
		&act.At, &sent, &failed, &retried, &capped, &owners, &holding, &beats)
	if err != nil {
		return Activity{}, errtext.Wrap(err, "admin: activity %s", a.table)
	}
	act.Sent, act.SentCapped = min(sent, ActivityCountLimit), sent > ActivityCountLimit
	act.Failed, act.FailedCapped = min(failed, ActivityCountLimit), failed > ActivityCountLimit
	act.Retried, act.RetriedCapped = retried, capped || act.SentCapped || act.FailedCapped
	for i, owner := range owners {
		act.Replicas = append(act.Replicas, Replica{Owner: owner, Holding: holding[i], LastHeartbeat: beats[i]})
	}
	return act, nil
}

// activitySQL is Activity's statement on the outbox table t, its dead
// letters d and its history h for window. Each read of rows in the
// window stops at ActivityCountLimit+1 rows. The history's rows are found
// by sent_at alone (no order): its partitions reaching into the window,
// and in each the BRIN index. The window and the limit are literals, not
// parameters: a generic plan (PostgreSQL's plan cache) would estimate a
// third of the history in the window and read its partitions whole.
func activitySQL(t, d, h string, window time.Duration) string {
	since := fmt.Sprintf(`now() - %d * interval '1 microsecond'`, window.Microseconds())
	retries := fmt.Sprintf(`(SELECT count(*) FROM jsonb_array_elements(x.attempt_log) AS e
		WHERE e->>'outcome' = 'retry' AND (e->>'ended')::timestamptz >= %s)`, since)
	return fmt.Sprintf(`WITH s AS (SELECT attempt_log FROM %[3]s WHERE sent_at >= %[4]s LIMIT %[6]d),
f AS (SELECT attempt_log FROM %[2]s WHERE failed_at >= %[4]s ORDER BY failed_at LIMIT %[6]d),
p AS (SELECT attempt_log FROM %[1]s WHERE status = 'PENDING' AND next_attempt_at >= %[4]s
	ORDER BY next_attempt_at, seq LIMIT %[6]d),
r AS (SELECT attempt_log, coalesce(lock_owner, '') AS owner, coalesce(heartbeat_at, locked_at, lease_until) AS beat
	FROM %[1]s WHERE status = 'PROCESSING' ORDER BY locked_at),
o AS (SELECT owner, count(*) AS n, max(beat) AS beat FROM r GROUP BY owner ORDER BY owner)
SELECT now(), (SELECT count(*) FROM s), (SELECT count(*) FROM f),
	(SELECT coalesce(sum(%[5]s), 0)::bigint FROM (SELECT attempt_log FROM s UNION ALL SELECT attempt_log FROM f
		UNION ALL SELECT attempt_log FROM p UNION ALL SELECT attempt_log FROM r) AS x),
	(SELECT count(*) FROM p) > %[7]d,
	ARRAY(SELECT owner FROM o), ARRAY(SELECT n FROM o), ARRAY(SELECT beat FROM o)`, t, d, h, since, retries, ActivityCountLimit+1, ActivityCountLimit)
}
