package pgoutboxtest

import "fmt"

// TB is the part of testing.TB the helpers use. A *testing.T, *testing.B
// or *testing.F satisfies it. It may gain other methods of testing.TB in
// later versions; a type that embeds testing.TB keeps satisfying it.
type TB interface {
	// Helper marks the calling function as a test helper.
	Helper()
	// Fatalf logs the formatted message and stops the test.
	Fatalf(format string, args ...any)
}

// fail stops the test with a message that names the helper.
func fail(tb TB, helper, format string, args ...any) {
	tb.Helper()
	tb.Fatalf("pgoutboxtest: %s: %s", helper, fmt.Sprintf(format, args...))
}
