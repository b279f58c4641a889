package natspub_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/publishers/natspub"
)

func TestNewConfig(t *testing.T) {
	t.Parallel()
	js := connect(t, natsURL)

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		for option, cfgs := range map[string][]natspub.Config{
			"AckTimeout": {{AckTimeout: -time.Second}, {AckTimeout: time.Millisecond}, {AckTimeout: 11 * time.Minute}},
			"MaxPending": {{MaxPending: -1}, {MaxPending: 65537}},
			"Source":     {{Source: " /x"}, {Source: "a\nb"}, {Source: strings.Repeat("s", 1025)}},
			"SubjectPrefix": {
				{SubjectPrefix: "a b."}, {SubjectPrefix: "*."}, {SubjectPrefix: "a.>."}, {SubjectPrefix: "a..b."},
				{SubjectPrefix: ".a"}, {SubjectPrefix: "a\x00."}, {SubjectPrefix: strings.Repeat("a", 256)},
			},
		} {
			for _, cfg := range cfgs {
				_, err := natspub.New(js, cfg)
				var cerr *outbox.ConfigError
				require.True(t, errors.As(err, &cerr), "%+v: %v", cfg, err)
				require.Equal(t, option, cerr.Field, "%+v", cfg)
				require.ErrorIs(t, err, outbox.ErrInvalidConfig)
			}
		}
	})
	t.Run("NilJetStream", func(t *testing.T) {
		t.Parallel()
		_, err := natspub.New(nil, natspub.Config{})
		var ie *outbox.InputError
		require.ErrorAs(t, err, &ie)
		require.Equal(t, "js", ie.Field)
	})
	t.Run("Valid", func(t *testing.T) {
		t.Parallel()
		for _, cfg := range []natspub.Config{
			{},
			{SubjectPrefix: "orders."},
			{SubjectPrefix: "orders"},
			{SubjectPrefix: "orders.v1-"},
			{SubjectPrefix: strings.Repeat("a", natspub.MaxSubjectPrefixLen)},
			{MaxPending: 1, AckTimeout: natspub.MinAckTimeout},
			{MaxPending: 65536, AckTimeout: natspub.MaxAckTimeout},
		} {
			p, err := natspub.New(js, cfg)
			require.NoError(t, err, "%+v", cfg)
			require.Equal(t, cfg.SubjectPrefix+"order.created", p.Subject("order.created"))
		}
	})
}
