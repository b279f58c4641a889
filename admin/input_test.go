package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/admin"
	"github.com/pgoutbox/pgoutbox/outbox"
)

func pgxIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

// TestBadInput checks that every invalid parameter gives an *InputError
// naming it and leaves every row as it was.
func TestBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	failed := b.insert(t, row{Status: "FAILED", FailedAgo: time.Hour}, row{Status: "SENT", SentAgo: time.Hour},
		row{Status: "PENDING"}, row{Status: "PROCESSING"})[0]
	before := b.snapshot(t)
	tooMany := make([]uuid.UUID, admin.MaxReplayLimit+1)
	tooMany[0] = failed

	cases := []struct {
		name, param string
		call        func() error
	}{
		{"ListStatus", "Status", func() error {
			_, err := b.admin.List(ctx, admin.ListParams{Status: "DONE"})
			return err
		}},
		{"ListLimitNegative", "Limit", func() error {
			_, err := b.admin.List(ctx, admin.ListParams{Limit: -1})
			return err
		}},
		{"ListLimitTooLarge", "Limit", func() error {
			_, err := b.admin.List(ctx, admin.ListParams{Limit: admin.MaxListLimit + 1})
			return err
		}},
		{"PurgeOlderThanNegative", "OlderThan", func() error {
			_, err := b.admin.Purge(ctx, admin.PurgeParams{Status: outbox.StatusSent, OlderThan: -time.Second})
			return err
		}},
		{"PurgeLimitTooLarge", "Limit", func() error {
			_, err := b.admin.Purge(ctx, admin.PurgeParams{Status: outbox.StatusSent, Limit: admin.MaxPurgeLimit + 1})
			return err
		}},
		{"PurgeLimitNegative", "Limit", func() error {
			_, err := b.admin.Purge(ctx, admin.PurgeParams{Status: outbox.StatusFailed, Limit: -5})
			return err
		}},
		{"PurgeStatusEmpty", "Status", func() error {
			_, err := b.admin.Purge(ctx, admin.PurgeParams{})
			return err
		}},
		{"PurgeStatusPending", "Status", func() error {
			_, err := b.admin.Purge(ctx, admin.PurgeParams{Status: outbox.StatusPending})
			return err
		}},
		{"PurgeStatusProcessing", "Status", func() error {
			_, err := b.admin.Purge(ctx, admin.PurgeParams{Status: outbox.StatusProcessing})
			return err
		}},
		{"PurgeStatusUnknown", "Status", func() error {
			_, err := b.admin.Purge(ctx, admin.PurgeParams{Status: "sent"})
			return err
		}},
		{"ReplayIDsWithFilter", "IDs", func() error {
			_, err := b.admin.Replay(ctx, admin.ReplayParams{IDs: []uuid.UUID{failed}, Type: "test.event"})
			return err
		}},
		{"ReplayIDsWithLimit", "IDs", func() error {
			_, err := b.admin.Replay(ctx, admin.ReplayParams{IDs: []uuid.UUID{failed}, Limit: 1})
			return err
		}},
		{"ReplayIDsEmpty", "IDs", func() error {
			_, err := b.admin.Replay(ctx, admin.ReplayParams{IDs: []uuid.UUID{}})
			return err
		}},
		{"ReplayTooManyIDs", "IDs", func() error {
			_, err := b.admin.Replay(ctx, admin.ReplayParams{IDs: tooMany})
			return err
		}},
		{"ReplayLimitTooLarge", "Limit", func() error {
			_, err := b.admin.Replay(ctx, admin.ReplayParams{Limit: admin.MaxReplayLimit + 1})
			return err
		}},
		{"ReplayLimitNegative", "Limit", func() error {
			_, err := b.admin.Replay(ctx, admin.ReplayParams{Limit: -1})
			return err
		}},
		{"ListTypeNUL", "Type", func() error {
			_, err := b.admin.List(ctx, admin.ListParams{Type: "test\x00event"})
			return err
		}},
		{"ListTypeInvalidUTF8", "Type", func() error {
			_, err := b.admin.List(ctx, admin.ListParams{Type: "test\xffevent"})
			return err
		}},
		{"ListAggregateIDNUL", "AggregateID", func() error {
			_, err := b.admin.List(ctx, admin.ListParams{AggregateID: "o\x00-1"})
			return err
		}},
		{"ListCodeInvalidUTF8", "Code", func() error {
			_, err := b.admin.List(ctx, admin.ListParams{Code: "handler\xfferror"})
			return err
		}},
		{"ReplayTypeNUL", "Type", func() error {
			_, err := b.admin.Replay(ctx, admin.ReplayParams{Type: "test\x00event"})
			return err
		}},
		{"ReplayTypeInvalidUTF8", "Type", func() error {
			_, err := b.admin.Replay(ctx, admin.ReplayParams{Type: "test\xffevent", DryRun: true})
			return err
		}},
		{"ListKeyNUL", "Key", func() error {
			_, err := b.admin.List(ctx, admin.ListParams{Key: "k\x00"})
			return err
		}},
		{"ListCreatedAfterTooLate", "CreatedAfter", func() error {
			_, err := b.admin.List(ctx, admin.ListParams{CreatedAfter: time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)})
			return err
		}},
		{"ListCreatedBeforeNotAfter", "CreatedBefore", func() error {
			at := time.Now()
			_, err := b.admin.List(ctx, admin.ListParams{CreatedAfter: at, CreatedBefore: at})
			return err
		}},
		{"CountStatus", "Status", func() error {
			_, err := b.admin.Count(ctx, admin.ListParams{Status: "DONE"})
			return err
		}},
		{"CountKeyInvalidUTF8", "Key", func() error {
			_, err := b.admin.Count(ctx, admin.ListParams{Key: "\xff"})
			return err
		}},
		{"ActivityWindowShort", "window", func() error {
			_, err := b.admin.Activity(ctx, time.Second)
			return err
		}},
		{"ActivityWindowLong", "window", func() error {
			_, err := b.admin.Activity(ctx, 2*time.Hour)
			return err
		}},
		{"ReplayCodeNUL", "Code", func() error {
			_, err := b.admin.Replay(ctx, admin.ReplayParams{Code: "publish\x00error", DryRun: true})
			return err
		}},
		{"ReplayCodeInvalidUTF8", "Code", func() error {
			_, err := b.admin.Replay(ctx, admin.ReplayParams{Code: "publish\xfferror"})
			return err
		}},
		{"ReplayFailedBeforeTooLate", "FailedBefore", func() error {
			_, err := b.admin.Replay(ctx, admin.ReplayParams{FailedBefore: time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)})
			return err
		}},
		{"ReplayFailedBeforeTooEarly", "FailedBefore", func() error {
			_, err := b.admin.Replay(ctx, admin.ReplayParams{FailedBefore: time.Date(-5000, 1, 1, 0, 0, 0, 0, time.UTC), DryRun: true})
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			requireInputErr(t, tc.call(), tc.param)
			require.Equal(t, before, b.snapshot(t), "a rejected call changed rows")
		})
	}
	require.Equal(t, "FAILED", b.status(t, failed))
}
