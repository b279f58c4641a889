package console_test

import (
	"testing"

	"github.com/pgoutbox/pgoutbox/integration/pgtest"
)

// TestMain gives the tests their database (pgtest) and stops the shared
// browser once they have run, before pgtest looks for leaked goroutines.
func TestMain(m *testing.M) { pgtest.Main(closingBrowser{m}) }

// closingBrowser runs the tests, then closes the browser they shared.
type closingBrowser struct{ m *testing.M }

func (c closingBrowser) Run() int {
	defer closeBrowser()
	return c.m.Run()
}
