package keeper

import "time"

// Overruns. A handler (or a publish) that runs past its timeout has had
// its context cancelled; one that ignores it keeps running, and nothing
// can stop it. The dispatcher makes it visible and keeps it from holding
// its event:
//
//   - the heartbeat finds it within a beat (LeaseDuration/3) of its
//     timeout and logs a WARN naming the event, its type and how long
//     the call has run, and again LeaseDuration later, then at doubling
//     intervals up to warnMax, for as long as it runs;
//   - Stats.Overrunning counts the calls running past their timeout now,
//     Stats.Overruns (and the pgoutbox.events.overrun counter) every call
//     found so, and Health reports them: Healthy fails while half the
//     handler slots (at least one) are held by such calls;
//   - the heartbeat renews no call past its timeout: its lease runs out
//     (the local deadline passes first, cancelling the call's context
//     with outbox.ErrLockLost), recovery returns the event to PENDING,
//     and this dispatcher's claims leave it out while the call still runs
//     (lease.ClaimParams.Skip), so that another replica delivers it. The
//     stuck call is abandoned: if it ever returns, its outcome is fenced
//     out and reported as outbox.ErrLockLost. That is the at-least-once
//     price: the other replica runs the event while the stuck call may
//     still be running.
//   - the events of its batch (under PerKey, of its wave) whose handler
//     succeeded and that wait for the batch's publish, which waits for
//     the stuck call, are no longer renewed either (phaseAwaitPublish):
//     they go to another replica the same way, their handlers run again
//     there, rather than being held for as long as the call runs; and
//     under PerKey the batch's later waves, which wait for the stuck
//     one, are let go unstarted and uncharged at their local deadline.
//
// A call with no timeout (NoHandlerTimeout) is never an overrun, and is
// renewed for as long as it runs.

// warnMax is the longest wait between two WARNs of one overrun.
const warnMax = time.Hour

// watchOverruns logs the overruns whose WARN is due and counts the new
// ones. The heartbeat calls it before each beat.
func (k *Keeper) watchOverruns() {
	due := k.cfg.Held.Overruns(k.cfg.Clock.Mono(), k.cfg.Lease, max(warnMax, k.cfg.Lease))
	for _, c := range due {
		if c.First {
			k.cfg.Report.Counters.Overruns.Add(1)
		}
		k.cfg.Logger.Warn("pgoutbox: a "+c.Phase+" is running past its timeout and ignores its cancelled context; "+
			"its lease is no longer renewed, so that another replica delivers the event",
			"table", k.cfg.Table, "owner", k.cfg.Owner, "event_id", c.ID, "event_type", c.EventType, "call", c.Phase,
			"running", c.Running.Round(time.Millisecond), "past_timeout", c.Over.Round(time.Millisecond))
	}
}
