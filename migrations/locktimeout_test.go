package migrations_test

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/migrations"
)

// locking matches a statement that takes a table's lock: writers queue
// behind it while it waits, so a lock_timeout must bound that wait.
var locking = regexp.MustCompile(`(?m)^\s*(ALTER|DROP|CREATE (UNIQUE )?INDEX|LOCK)\b`)

// unlockedHalves are the halves that lock only what they create: 001
// creates the table (and its down drops everything), 010's up alters and
// indexes the tables it has just created.
var unlockedHalves = map[string]bool{"001_create_outbox.sql up": true, "001_create_outbox.sql down": true, "010_lean_tables.sql up": true}

// Each half (up and down) of each outbox migration sets a lock_timeout
// before its first statement that locks a table.
func TestMigrationsBoundTheirLockWaits(t *testing.T) {
	t.Parallel()
	names, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, names)
	for _, name := range names {
		body, err := fs.ReadFile(migrations.FS, name)
		require.NoError(t, err)
		for i, half := range strings.SplitN(string(body), "---- create above / drop below ----", 2) {
			first := locking.FindStringIndex(half)
			if first == nil || unlockedHalves[name+" "+[]string{"up", "down"}[i]] {
				continue
			}
			set := strings.Index(half, "SET LOCAL lock_timeout")
			assert.True(t, set >= 0 && set < first[0], "%s (%s) locks a table before setting a lock_timeout", name, []string{"up", "down"}[i])
		}
	}
}
