package tmplmigrate_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/outbox"
)

// Every function that takes a caller's *pgx.Conn answers a nil one with an
// error, as dispatcher.New(nil) does, instead of panicking.
func TestNilConn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	version := func(f func(context.Context) (int32, error)) func() error {
		return func() error { _, err := f(ctx); return err }
	}
	for name, call := range map[string]func() error{
		"inbox.Migrate":      func() error { return inbox.Migrate(ctx, nil, inbox.Config{}) },
		"inbox.Verify":       func() error { return inbox.Verify(ctx, nil, inbox.Config{}) },
		"inbox.Version":      version(func(ctx context.Context) (int32, error) { return inbox.Version(ctx, nil, inbox.Config{}) }),
		"migrations.Migrate": func() error { return migrations.Migrate(ctx, nil, migrations.Config{}) },
		"migrations.Verify":  func() error { return migrations.Verify(ctx, nil, migrations.Config{}) },
		"migrations.Version": version(func(ctx context.Context) (int32, error) { return migrations.Version(ctx, nil, migrations.Config{}) }),
	} {
		t.Run(name, func(t *testing.T) {
			var ie *outbox.InputError
			require.ErrorAs(t, call(), &ie)
			require.Equal(t, "conn", ie.Field)
			require.ErrorIs(t, call(), outbox.ErrInvalidInput)
		})
	}
}
