package relay

// Stats is a point-in-time snapshot of a relay's counters, since New. It
// holds numbers only.
type Stats struct {
	// Published counts events published and acked, in batches whose
	// cursor move was recorded (metered as
	// pgoutbox.relay.events.published).
	Published uint64
	// Parked counts events parked with their key (a permanent failure, or
	// KeyRetries spent), and the later events of parked keys
	// (pgoutbox.relay.events.parked).
	Parked uint64
	// KeysParked counts keys this relay parked.
	KeysParked uint64
	// Batches counts batches whose cursor move was recorded
	// (pgoutbox.relay.batches).
	Batches uint64
	// Retries counts publish retries within lanes.
	Retries uint64
	// Ticks counts ticks this relay's ticker recorded
	// (pgoutbox.relay.ticks).
	Ticks uint64
	// Errors counts the errors passed to OnError.
	Errors uint64
}

// Stats returns a snapshot of the counters.
func (r *Relay) Stats() Stats {
	c := r.rec
	return Stats{
		Published: c.published.Load(), Parked: c.parked.Load(), KeysParked: c.keysParked.Load(),
		Batches: c.batches.Load(), Retries: c.retries.Load(), Ticks: c.ticks.Load(), Errors: c.errs.Load(),
	}
}
