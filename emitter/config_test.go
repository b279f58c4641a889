package emitter_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/emitter"
	"github.com/pgoutbox/pgoutbox/outbox"
)

func TestNew(t *testing.T) {
	t.Parallel()

	t.Run("AcceptsBounds", func(t *testing.T) {
		t.Parallel()
		for _, cfg := range []emitter.Config{
			{},
			{MaxPayloadBytes: 1, MaxHeaders: 1, MaxHeaderBytes: 1},
			{MaxPayloadBytes: 64 << 20, MaxHeaders: 1024, MaxHeaderBytes: 1 << 20},
			{NoHeaders: true},
			{NotifyEveryEmit: true},
			{NotifyInterval: 10 * time.Second},
			{Table: outbox.Table{Schema: "billing", Name: "events"}},
			{Kind: outbox.KindLog},
			{Kind: outbox.KindLog, DisableNotify: true},
		} {
			_, err := emitter.New(cfg)
			require.NoError(t, err, "%+v", cfg)
		}
	})

	t.Run("RejectsOutOfRange", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			option string
			cfg    emitter.Config
		}{
			{"MaxHeaderBytes", emitter.Config{MaxHeaderBytes: -1}},
			{"MaxHeaderBytes", emitter.Config{MaxHeaderBytes: 1<<20 + 1}},
			{"MaxHeaders", emitter.Config{MaxHeaders: -1}}, // no longer "no headers": NoHeaders says that
			{"MaxHeaders", emitter.Config{MaxHeaders: 1025}},
			{"MaxHeaders", emitter.Config{MaxHeaders: 1, NoHeaders: true}},
			{"NotifyInterval", emitter.Config{NotifyInterval: -1}}, // no longer "every Emit": NotifyEveryEmit says that
			{"NotifyInterval", emitter.Config{NotifyInterval: 10*time.Second + 1}},
			{"NotifyInterval", emitter.Config{NotifyInterval: time.Second, NotifyEveryEmit: true}},
			{"MaxPayloadBytes", emitter.Config{MaxPayloadBytes: -1}},
			{"MaxPayloadBytes", emitter.Config{MaxPayloadBytes: 64<<20 + 1}},
			{"Table", emitter.Config{Table: outbox.Table{Name: "Bad-Name"}}},
			{"Table", emitter.Config{Table: outbox.Table{Schema: "pg_catalog"}}},
			{"Kind", emitter.Config{Kind: outbox.TableKind(7)}},
			{"NotifyEveryEmit", emitter.Config{Kind: outbox.KindLog, NotifyEveryEmit: true}},
		} {
			_, err := emitter.New(tc.cfg)
			var cerr *outbox.ConfigError
			require.ErrorAs(t, err, &cerr, "%+v", tc.cfg)
			require.Equal(t, tc.option, cerr.Field)
			require.ErrorIs(t, err, outbox.ErrInvalidConfig)
		}
	})
	// A -1 that used to be magic is refused with the field that now says it.
	t.Run("OldMagicNumbersNameTheNewFields", func(t *testing.T) {
		t.Parallel()
		_, err := emitter.New(emitter.Config{NotifyInterval: -1})
		require.ErrorContains(t, err, "set NotifyEveryEmit")
		_, err = emitter.New(emitter.Config{MaxHeaders: -1})
		require.ErrorContains(t, err, "set NoHeaders")
	})
}
