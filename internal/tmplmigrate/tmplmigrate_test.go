package tmplmigrate_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Every function that takes a caller's *pgx.Conn or *pgxpool.Pool answers
// a nil one with an *outbox.InputError, as dispatcher.New(nil) does,
// instead of panicking.
func TestNilConn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	version := func(f func(context.Context) (int32, error)) func() error {
		return func() error { _, err := f(ctx); return err }
	}
	var conn *pgx.Conn
	var pool *pgxpool.Pool
	for name, call := range map[string]func() error{
		"inbox.Migrate/conn":      func() error { return inbox.Migrate(ctx, conn, inbox.Config{}) },
		"inbox.Migrate/pool":      func() error { return inbox.Migrate(ctx, pool, inbox.Config{}) },
		"inbox.Verify/conn":       func() error { return inbox.Verify(ctx, conn, inbox.Config{}) },
		"inbox.Verify/pool":       func() error { return inbox.Verify(ctx, pool, inbox.Config{}) },
		"inbox.Version/conn":      version(func(ctx context.Context) (int32, error) { return inbox.Version(ctx, conn, inbox.Config{}) }),
		"migrations.Migrate/conn": func() error { return migrations.Migrate(ctx, conn, migrations.Config{}) },
		"migrations.Migrate/pool": func() error { return migrations.Migrate(ctx, pool, migrations.Config{}) },
		"migrations.Verify/conn":  func() error { return migrations.Verify(ctx, conn, migrations.Config{}) },
		"migrations.Verify/pool":  func() error { return migrations.Verify(ctx, pool, migrations.Config{}) },
		"migrations.Version/pool": version(func(ctx context.Context) (int32, error) { return migrations.Version(ctx, pool, migrations.Config{}) }),
	} {
		t.Run(name, func(t *testing.T) {
			var ie *outbox.InputError
			require.ErrorAs(t, call(), &ie)
			require.Equal(t, "conn", ie.Field)
			require.ErrorIs(t, call(), outbox.ErrInvalidInput)
		})
	}
}
