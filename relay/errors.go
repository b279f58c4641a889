package relay

import (
	"errors"
	"fmt"

	"github.com/pgoutbox/pgoutbox/internal/relay/store"
)

// The relay's sentinel errors. Match them with errors.Is. Those the
// relay's store returns are the same values, declared here so that
// callers need not import an internal package.
var (
	// ErrSnapshotBackwards: a tick's snapshot is older than its
	// predecessor's, or than the snapshot this relay last read (a restore
	// of an older backup, a lossy failover), or the cluster's transaction
	// ids are behind the newest tick (a logical dump restored into a
	// cluster whose ids are lower). The group stops, publishing nothing:
	// events committed after the restore point could be skipped
	// otherwise. See docs/relay.md, "Restore and failover".
	ErrSnapshotBackwards = store.ErrSnapshotBackwards
	// ErrGroupBusy: another relay holds the group's lease. Run waits for
	// it; CreateGroup and DropGroup do not return it.
	ErrGroupBusy = store.ErrGroupBusy
	// ErrNoGroup: the consumer group does not exist; create it with
	// CreateGroup (or outboxctl relay group create) first.
	ErrNoGroup = store.ErrNoGroup
	// ErrGroupExists: CreateGroup was given a group that exists already.
	ErrGroupExists = store.ErrGroupExists
	// ErrGroupStopped: the group was stopped (its cursor row holds a
	// reason) and stays stopped until an operator acts; see StopError.
	ErrGroupStopped = store.ErrGroupStopped
	// ErrNoHeadroom: the log has no part left for new transactions'
	// events (every Emit into it would fail). Start refuses with an
	// error matching it; a relay with a ticker adds the missing parts
	// first, so it means this relay runs without one (NoTicker) and no
	// ticker keeps them: run outboxctl relay maintain as the log's owner.
	ErrNoHeadroom = store.ErrNoHeadroom
	// ErrRunning is returned by Start and Run when the relay is already
	// starting or running: a relay runs once.
	ErrRunning = errors.New("pgoutbox: relay is already running")
	// ErrStopped is returned by Start and Run when the relay was stopped
	// (by Stop, or by the end of the context its Start or Run was given):
	// create a new one with New.
	ErrStopped = errors.New("pgoutbox: relay was stopped; create a new one with New")
	// ErrDrainTimeout is returned by Run, Stop and Err when the batch in
	// flight did not finish within DrainTimeout (or before the ctx of a
	// Stop call ended) and was cancelled: its cursor did not move, and the
	// group's next holder publishes it again (at-least-once).
	ErrDrainTimeout = errors.New("pgoutbox: relay: drain timeout exceeded, the batch in flight was cancelled")
	// ErrUnhealthy is matched by the errors Health.Healthy returns.
	ErrUnhealthy = errors.New("pgoutbox: relay unhealthy")
)

// StopError says why a consumer group stopped: Run (and Stop, Err) return
// it when the relay ended because its group stopped, and Health reports
// it. The group's cursor row keeps Reason until an operator acts
// (outboxctl relay resume, after the checks docs/relay.md "Restore and
// failover" lists); nothing was published past the cursor.
type StopError struct {
	// Group is the consumer group that stopped.
	Group string
	// Reason says why, as the cursor row's stopped_reason holds it.
	Reason string
	// Err is the cause: ErrSnapshotBackwards, ErrGroupStopped (stopped
	// before this relay took it), or another.
	Err error
}

// Error implements error.
func (e *StopError) Error() string {
	msg := fmt.Sprintf("pgoutbox: relay: group %q stopped: %s", e.Group, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the cause.
func (e *StopError) Unwrap() error { return e.Err }
