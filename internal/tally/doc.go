// Package tally keeps the dispatcher's per-type counts of events it does
// not deliver, and when each type was last logged, so that each type is
// logged at WARN at most every WarnEvery: Waiting holds the latest count
// of events of types no running dispatcher claims (internal/claim/types.go,
// checkWaiting, every RecoverEvery-th poll), Unroutable the events
// released because nothing routes them (dispatcher/unroutable.go).
//
// The dispatcher's Stats reads both (Counts). Each has its own leaf lock;
// both take the time as an argument and log nothing themselves: they
// return the types to log.
package tally
