package testdb

import (
	"fmt"
	"testing"
)

// ExampleTB stands in for a testing.TB in runnable examples, which get
// none, so that they get their database as tests do:
//
//	t := &testdb.ExampleTB{}
//	defer t.Done()
//	db := testdb.NewMigrated(t)
//
// Fatalf and Errorf panic, which fails the example, and Cleanup collects
// the clean-ups that Done runs. Only those methods and Helper may be
// called; the embedded testing.TB is nil.
type ExampleTB struct {
	testing.TB
	cleanups []func()
}

// Helper does nothing.
func (e *ExampleTB) Helper() {}

// Fatalf panics with the message.
func (e *ExampleTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// Errorf panics with the message.
func (e *ExampleTB) Errorf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// Cleanup registers f to run at Done.
func (e *ExampleTB) Cleanup(f func()) { e.cleanups = append(e.cleanups, f) }

// Done runs the clean-ups, the last registered first. An example defers it.
func (e *ExampleTB) Done() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
	e.cleanups = nil
}
