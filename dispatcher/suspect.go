package dispatcher

import "time"

// Suspects. An event recovered before (recoveries > 0: a worker died, or
// lost its lease, during one of its attempts) is a suspect: it may be the
// poison event that killed the worker. No claim marks a suspect started
// (see start.go); runSuspect runs each suspect alone among suspects,
// marked right before its handler and holding the dispatcher's suspect
// turn from before its mark until its outcome is written, so that no
// other suspect shows a started attempt meanwhile.
// When a poison event kills the process, the events charged a recovery
// with it are those its claim had marked or that ran beside it, once
// each: they come back as suspects, and no suspect runs beside another,
// so they are not dead-lettered with it after MaxRecoveries deaths.
//
// A suspect waits for the turn without a handler slot, so the other
// events of the dispatcher run meanwhile; one that waits longer than
// LeaseDuration (another suspect's handler does not return) is released
// unstarted, uncharged, for any replica to claim, rather than held under
// a renewed lease.

// takeSuspectTurn waits for the suspect turn. It returns false without it
// when the item is let go first, or when LeaseDuration passes first: then
// the item is released unstarted.
func (d *Dispatcher) takeSuspectTurn(it *item) bool {
	wait := time.NewTimer(d.cfg.LeaseDuration)
	defer wait.Stop()
	select {
	case d.suspects <- struct{}{}:
		return true
	case <-d.held.letGo(it):
	case <-it.batch.ctx.Done():
	case <-wait.C:
		d.releaseItems([]*item{it}, "release of a suspect kept waiting failed; its lease will expire and be recovered")
	}
	return false
}

// runSuspect runs one suspect once it has the turn, in a handler slot of
// its own, publishes it alone if it has a destination, and gives the turn
// back once its outcome is written (the item let go) or the batch ends.
// Each suspect of a batch runs on a goroutine of its own, so that each
// waits for the turn on its own clock. Run does not wait for these
// goroutines, and need not: its drain waits until the held set is empty,
// and each wait here but the handler call ends when the item is let go
// (released at stop, lost, or its outcome written) or its batch ends.
func (d *Dispatcher) runSuspect(hi handledItem) {
	it := hi.item
	if !d.await(it) || !d.takeSuspectTurn(it) {
		return
	}
	defer func() { <-d.suspects }()
	if !d.acquireSlot(it.batch, d.held.letGo(it)) {
		return
	}
	res, publish, record := d.runHandler(it, hi.h)
	d.releaseSlots(1)
	switch {
	case publish:
		d.publish(d.dropLost([]*item{it}))
	case record:
		d.finish(it, res)
	default:
		return // let go, or the batch ended, before it started
	}
	select {
	case <-d.held.letGo(it):
	case <-it.batch.ctx.Done():
	}
}
