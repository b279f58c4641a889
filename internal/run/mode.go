package run

import (
	"context"

	"github.com/pgoutbox/pgoutbox/internal/claim"
	"github.com/pgoutbox/pgoutbox/internal/held"
)

// Mode is a dispatcher's scheduling mode, chosen once by NewMode: how its
// claims are made (the claimer asks it through claim.Scheduler) and how
// a claimed batch runs. There are three:
//
//   - unordered: a batch's handlers run concurrently, its publish-only
//     events are published at once (runBatch);
//   - in claim order (Concurrency 1 without per-key ordering): batches run
//     one after another in claim order, each a segment at a time (see
//     claimorder.go);
//   - per key (Ordering PerKey): each key's run is delivered in order,
//     wave by wave (see ordered.go).
type Mode interface {
	// The claimer's questions, and Dispatch (see claim.Scheduler, which
	// documents what each promises; slots.go and suspect.go are their
	// rules).
	claim.Scheduler

	// bind gives the mode the runner that runs its batches (New).
	bind(r *Runner)
	// letGoBehindCall lets go an item whose older call still runs (see
	// await).
	letGoBehindCall(it *held.Item)
}

// NewMode returns the scheduling mode of a dispatcher: per key under
// Ordering PerKey, else in claim order with one handler slot, else
// unordered. Give it to New (Config.Mode), which binds it to the runner.
func NewMode(perKey bool, concurrency int) Mode {
	switch {
	case perKey:
		return &byKey{}
	case concurrency == 1:
		return &inClaimOrder{}
	}
	return &unordered{}
}

// unordered is the mode without ordering and with more than one slot.
type unordered struct{ r *Runner }

func (m *unordered) bind(r *Runner)                 { m.r = r }
func (m *unordered) Claimers() int                  { return m.r.cfg.Claimers }
func (m *unordered) Room(held, suspects int) int    { return m.r.roomBesideSuspects(held, suspects) }
func (m *unordered) SkipSuspects(suspects int) bool { return suspects >= m.r.suspectsAhead() }
func (m *unordered) Ordered() bool                  { return false }
func (m *unordered) StartsFor(limit int) (int, int) { return m.r.startsFor(limit, true) }
func (m *unordered) ReleaseSlots(n int)             { m.r.releaseSlots(n) }
func (m *unordered) WakeOnRetry() bool              { return false }
func (m *unordered) letGoBehindCall(it *held.Item)  { m.r.releaseBehindCall(it) }
func (m *unordered) Dispatch(items []*held.Item) context.Context {
	go m.r.runBatch(items)
	return items[0].Batch.Ctx
}

// inClaimOrder is the mode of Concurrency 1 without per-key ordering (see
// claimorder.go).
type inClaimOrder struct {
	r     *Runner
	turns turns // batches in claim order
}

func (m *inClaimOrder) bind(r *Runner)                 { m.r = r }
func (m *inClaimOrder) Claimers() int                  { return 1 }
func (m *inClaimOrder) Room(held, suspects int) int    { return m.r.roomBesideSuspects(held, suspects) }
func (m *inClaimOrder) SkipSuspects(suspects int) bool { return suspects >= m.r.suspectsAhead() }
func (m *inClaimOrder) Ordered() bool                  { return false }
func (m *inClaimOrder) ReleaseSlots(n int)             { m.r.releaseSlots(n) }
func (m *inClaimOrder) WakeOnRetry() bool              { return false }
func (m *inClaimOrder) letGoBehindCall(it *held.Item)  { m.r.releaseBehindCall(it) }

// StartsFor takes no slot: a batch waits for its turn without one (see
// claimorder.go).
func (m *inClaimOrder) StartsFor(limit int) (int, int) { return m.r.startsFor(limit, false) }

func (m *inClaimOrder) Dispatch(items []*held.Item) context.Context {
	prev, done := m.turns.take()
	go m.r.runInTurn(items, prev, done)
	return items[0].Batch.Ctx
}

// byKey is the mode of Ordering PerKey (see ordered.go).
type byKey struct{ r *Runner }

func (m *byKey) bind(r *Runner)        { m.r = r }
func (m *byKey) Claimers() int         { return m.r.cfg.Claimers }
func (m *byKey) Room(held, _ int) int  { return held } // ordered claims cannot leave suspects out
func (m *byKey) SkipSuspects(int) bool { return false }
func (m *byKey) Ordered() bool         { return true }
func (m *byKey) ReleaseSlots(n int)    { m.r.releaseSlots(n) }
func (m *byKey) WakeOnRetry() bool     { return true }

// StartsFor marks none (see slots.go).
func (m *byKey) StartsFor(int) (int, int) { return 0, 0 }

// letGoBehindCall removes the item with its lease left to expire: per-key
// claims cannot leave it out, and its release would wake a claim at once
// (see await).
func (m *byKey) letGoBehindCall(it *held.Item) { m.r.held.Remove([]*held.Item{it}) }

func (m *byKey) Dispatch(items []*held.Item) context.Context {
	go m.r.runOrdered(items)
	return items[0].Batch.Ctx
}
