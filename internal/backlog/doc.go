// Package backlog samples the dispatcher's backlog gauges:
// pgoutbox.backlog.due (the due PENDING events, counted up to Limit) and
// pgoutbox.backlog.oldest_due_age (how long the oldest has been due),
// read from the due index by a bounded query (Query), never a scan of the
// table.
//
// # Inputs
//
// A Config: the pool, the table, the interval a sample serves, the meter
// and the gauges' attributes, the bound of the query, the clock, and a
// callback for errors (a gauge not registered, a sample that failed).
//
// # Who calls it
//
// The dispatcher's Run: Observe registers the gauges' callback, Run takes
// the samples on a goroutine of Run's until its quit context ends, and the
// unregistration Observe returns is called when Run ends. A collection
// only reads the last sample and asks Run for a new one when it is older
// than the interval, so a collection never waits for the database; with no
// MeterProvider collecting, no query runs.
//
// # Lock order
//
// Sampler's mutex guards the last sample only; nothing is locked while it
// is held, and the query runs without it.
package backlog
