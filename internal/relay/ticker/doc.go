// Package ticker runs the log relay's ticker (issue 27,
// docs/relay-design.md section 2): one relay per log holds the ticker's
// lease row (token, lease_until from the database clock) and calls the
// tick function every Interval; the function records a tick only when
// events were written, a long transaction committed, or Idle passed. The
// ticks are the snapshots the consumer groups' batches run between
// (internal/relay/read).
//
// # Election
//
// Every relay that runs a Ticker tries to take the lease: the holder
// renews it every third of Lease, the others try again at that pace and
// take it once it is released or has expired. The holder trusts its lease
// for Lease from the start of the renewal that took it, and ticks only
// within that; the tick function checks the token and the lease again in
// the tick's own transaction, so a holder that lost the lease without
// knowing ticks nothing (ErrLeaseLost makes it a follower at once).
//
// # Parts
//
// The holder keeps the log's parts ahead of the current transaction id
// (store.KeepParts) when it takes the lease and every PartsEvery tick
// calls after, and reports the head-room through OnParts. How many: two
// days of transaction ids at the rate it observes (the xmax each of those
// calls sees, a weighted mean of the rates between calls), at least
// store.MinParts and at most store.MaxParts (store.PartsFor).
//
// # Errors
//
// A failing tick is tried again every Interval; OnError hears of a
// repeated error (same sentinel, SQLSTATE or text) at most once per third
// of Lease, so that a snapshot that went backwards is not reported a
// hundred times a second.
package ticker
