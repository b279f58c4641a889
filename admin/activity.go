package admin

import (
	"context"
	"errors"
	"time"
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
	// claim time when none was renewed yet).
	LastHeartbeat time.Time `json:"last_heartbeat"`
}

// Activity counts the events sent, retried and failed in the last
// window (MinActivityWindow to MaxActivityWindow, by the database
// clock) and lists the lease owners holding PROCESSING rows, in one
// statement.
func (a *Admin) Activity(ctx context.Context, window time.Duration) (Activity, error) {
	return Activity{}, errors.New("TODO")
}
