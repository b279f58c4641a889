// Package waker decides when wake-ups start claims: the cooldown between
// claims while the dispatcher is busy, the one claim owed to wake-ups that
// arrive while claims are in flight, and the follow-up claims that find
// events whose emitters sent no notification.
//
// It is pure logic and owns no goroutine or timer. Its only caller is the
// dispatcher's coordinator loop (internal/claim/claimer.go), which passes
// each wake-up (a notification or Trigger), each firing of its timer and
// each end of a claim, with the time (from the dispatcher's clock) and
// whether a claim is in flight; the Waker answers whether to claim now and
// arms the coordinator's timer through Config.ArmFunc. Its inputs are the
// dispatcher's WakeupCooldown and BatchSize. It has no lock: only the
// coordinator goroutine calls it.
package waker
