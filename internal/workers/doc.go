// Package workers keeps goroutines for handler calls alive between calls
// (Pool), so that a call starts on a goroutine whose stack has grown
// already instead of a new one.
//
// The dispatcher builds one Pool per run (dispatcher/run.go), ending with
// the run's quit channel, and its batches start their workers on it
// (internal/run/work.go). Its inputs are that channel and the clock that
// times a goroutine's idle wait (Idle). It bounds nothing itself: each
// call holds a handler slot, which the runner (internal/run) takes
// before Go.
package workers
