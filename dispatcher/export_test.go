package dispatcher

import (
	"time"

	"github.com/pgoutbox/pgoutbox/internal/purge"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// SetClock makes the dispatcher built from c read its local clock (lease
// deadlines) from now instead of time.Now. The database clock still
// decides every due and expiry time.
func SetClock(c *Config, now func() time.Time) { c.now = now }

// HandlersTiny reports whether the dispatcher runs its handlers as tiny
// ones, a few workers per batch (see handlersTiny).
func (d *Dispatcher) HandlersTiny() bool { return d.runner.HandlersTiny() }

// SetHandlerTime sets the running average of handler durations, as if the
// handlers so far had taken avg each.
func (d *Dispatcher) SetHandlerTime(avg time.Duration) { d.runner.SetHandlerTime(avg) }

// SetRetentionHook makes the dispatcher built from c call f after each
// retention batch with the batch's status, its limit, the rows it deleted
// and whether another replica's batch held the lock (skipped).
func SetRetentionHook(c *Config, f func(status outbox.Status, limit int, deleted int64, skipped bool)) {
	c.onRetentionBatch = func(status outbox.Status, limit int, res purge.Result) {
		f(status, limit, res.Deleted, res.Skipped)
	}
}

// SetCircuitHook makes the dispatcher built from c call f with each new
// state of its publisher's circuit, in order (f must not call the
// dispatcher).
func SetCircuitHook(c *Config, f func(CircuitState)) { c.onCircuit = f }

// SetClaimHook makes the dispatcher built from c call f after each claim
// that took events, before it dispatches them, with the claimed events.
func SetClaimHook(c *Config, f func(events []outbox.Event)) { c.onClaimed = f }

// SetRecoverHook makes the dispatcher built from c call f after each
// recovery pass with the poll cycle's number, the recovery statements it
// ran and the rows they returned (PENDING or FAILED).
func SetRecoverHook(c *Config, f func(poll uint64, statements, rows int)) { c.onRecoverPass = f }

// SetSuspectWait makes the dispatcher built from c release a suspect kept
// waiting for the turn after wait instead of LeaseDuration, so that a test
// can keep leases long (none lapses however loaded the machine) and still
// see the release soon.
func SetSuspectWait(c *Config, wait time.Duration) { c.suspectWait = wait }

// SetFollowUpsOverHook makes the dispatcher built from c call f, on its
// coordinator goroutine, when its waker starts a claim and arms no
// follow-up after it (f must not block).
func SetFollowUpsOverHook(c *Config, f func()) { c.onFollowUpsOver = f }

// SetDueProbeHook makes the dispatcher built from c call f, on its
// coordinator goroutine, after each next-due probe it runs once claims
// have settled (while wake-ups work), with how long until the next due
// event and whether there is one; the due timer is armed from them
// (when the wait is shorter than the poll interval) after f returns
// (f must not block).
func SetDueProbeHook(c *Config, f func(wait time.Duration, found bool)) { c.onDueProbe = f }
