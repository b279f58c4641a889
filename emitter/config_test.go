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
			{MaxPayloadBytes: emitter.MaxMaxPayloadBytes, MaxHeaders: emitter.MaxMaxHeaders, MaxHeaderBytes: emitter.MaxMaxHeaderBytes},
			{MaxHeaders: -1},
			{NotifyInterval: -1},
			{NotifyInterval: 10 * time.Second},
			{NotifyChannel: "Any Channel ✓"},
			{DisableNotify: true, NotifyChannel: string(make([]byte, 100))},
			{Table: outbox.Table{Schema: "billing", Name: "events"}},
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
			{"MaxHeaderBytes", emitter.Config{MaxHeaderBytes: emitter.MaxMaxHeaderBytes + 1}},
			{"MaxHeaders", emitter.Config{MaxHeaders: -2}},
			{"MaxHeaders", emitter.Config{MaxHeaders: emitter.MaxMaxHeaders + 1}},
			{"NotifyInterval", emitter.Config{NotifyInterval: -2}},
			{"NotifyInterval", emitter.Config{NotifyInterval: 10*time.Second + 1}},
			{"MaxPayloadBytes", emitter.Config{MaxPayloadBytes: -1}},
			{"MaxPayloadBytes", emitter.Config{MaxPayloadBytes: emitter.MaxMaxPayloadBytes + 1}},
			{"NotifyChannel", emitter.Config{NotifyChannel: string(make([]byte, 64))}},
			{"NotifyChannel", emitter.Config{NotifyChannel: "a\xff"}},
			{"NotifyChannel", emitter.Config{NotifyChannel: "a\x00"}},
			{"Table", emitter.Config{Table: outbox.Table{Name: "Bad-Name"}}},
			{"Table", emitter.Config{Table: outbox.Table{Schema: "pg_catalog"}}},
		} {
			_, err := emitter.New(tc.cfg)
			var cerr *outbox.ConfigError
			require.ErrorAs(t, err, &cerr, "%+v", tc.cfg)
			require.Equal(t, tc.option, cerr.Field)
			require.ErrorIs(t, err, outbox.ErrInvalidConfig)
		}
	})
}
