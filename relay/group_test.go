package relay

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/testctx"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// CreateGroup and DropGroup refuse an argument they cannot use with an
// *outbox.InputError naming it, before anything is read or written.
func TestGroupArguments(t *testing.T) {
	t.Parallel()
	ctx := testctx.New(t)
	pool := lazyPool(t)
	log := outbox.Table{Name: "events_log"}
	for _, tc := range []struct {
		field string
		err   error
	}{
		{"pool", CreateGroup(ctx, nil, log, "g", Latest)},
		{"log", CreateGroup(ctx, pool, outbox.Table{}, "g", Latest)},
		{"log", CreateGroup(ctx, pool, outbox.Table{Name: "Bad"}, "g", Latest)},
		{"group", CreateGroup(ctx, pool, log, "", Latest)},
		{"group", CreateGroup(ctx, pool, log, strings.Repeat("g", 201), Oldest)},
		{"group", CreateGroup(ctx, pool, log, "a\x00", Latest)},
		{"from", CreateGroup(ctx, pool, log, "g", From(2))},
		{"pool", DropGroup(ctx, nil, log, "g")},
		{"log", DropGroup(ctx, pool, outbox.Table{}, "g")},
		{"group", DropGroup(ctx, pool, log, "")},
		{"group", DropGroup(ctx, pool, log, "\xff")},
	} {
		var ierr *outbox.InputError
		require.ErrorAs(t, tc.err, &ierr, tc.field)
		require.Equal(t, tc.field, ierr.Field)
		require.ErrorIs(t, tc.err, outbox.ErrInvalidInput)
	}
	// Valid arguments reach the store, which finds no such log table.
	for _, err := range []error{
		CreateGroup(ctx, pool, log, strings.Repeat("é", 100), Oldest),
		DropGroup(ctx, pool, log, "g"),
	} {
		require.Error(t, err)
		require.False(t, errors.Is(err, outbox.ErrInvalidInput), "%v", err)
	}
}
