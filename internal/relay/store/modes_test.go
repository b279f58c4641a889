package store_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/internal/relay/batch"
	"github.com/pgoutbox/pgoutbox/internal/relay/relaytest"
	"github.com/pgoutbox/pgoutbox/internal/relay/store"
)

// TestEveryExecMode runs the store's statements (tick, parts, group
// lease, streams of merged ticks read in pieces, move with parked rows,
// lag) in each of pgx's query exec modes: every value is passed as text, so the text-only modes of a
// transaction-mode pooler work too.
func TestEveryExecMode(t *testing.T) {
	t.Parallel()
	modes := map[string]pgx.QueryExecMode{
		"cache statement": pgx.QueryExecModeCacheStatement, "cache describe": pgx.QueryExecModeCacheDescribe,
		"describe exec": pgx.QueryExecModeDescribeExec, "exec": pgx.QueryExecModeExec,
		"simple protocol": pgx.QueryExecModeSimpleProtocol,
	}
	for name, mode := range modes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db, table := relaytest.NewLog(t)
			cfg, err := pgxpool.ParseConfig(db.URL)
			require.NoError(t, err)
			cfg.ConnConfig.RuntimeParams["search_path"] = db.Schema
			cfg.ConnConfig.DefaultQueryExecMode = mode
			pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			s, err := store.New(pool, table)
			require.NoError(t, err)
			ctx := t.Context()

			tk := uuid.New()
			held, err := s.TakeTicker(ctx, "m", tk, time.Minute)
			require.NoError(t, err)
			require.True(t, held)
			_, _, err = s.AddParts(ctx)
			require.NoError(t, err)
			require.NoError(t, s.CreateGroup(ctx, "g", store.Latest))
			token := uuid.New()
			cur, err := s.TakeGroup(ctx, "g", "m", token, time.Minute)
			require.NoError(t, err)
			require.NoError(t, s.RenewGroup(ctx, "g", token, time.Minute))

			open, err := pool.Begin(ctx) // in the next tick's xip, then done
			require.NoError(t, err)
			late := relaytest.Emit(t, open, "late", 1)
			ids := relaytest.Emit(t, pool, "k", 3)
			_, made, err := s.Tick(ctx, tk, time.Hour)
			require.NoError(t, err)
			require.True(t, made)
			require.NoError(t, open.Commit(ctx))
			_, made, err = s.Tick(ctx, tk, time.Hour)
			require.NoError(t, err)
			require.True(t, made)

			var got []uuid.UUID
			for {
				st, ok, err := s.Stream(ctx, token, cur, 2)
				require.NoError(t, err)
				if !ok {
					break
				}
				t.Cleanup(st.Close)
				for partial := true; partial; {
					b, err := st.Next(2)
					require.NoError(t, err)
					var parked []batch.Parked
					for _, ev := range b.Events {
						got = append(got, ev.Event.ID)
						require.Equal(t, map[string]string{"h": "v"}, ev.Event.Headers)
						parked = append(parked, batch.Parked{Event: ev, Key: ev.Key(), Code: "c", Err: "e"})
					}
					cur, err = s.Move(ctx, token, cur, b, parked, []store.ParkedKey{{Key: "k", Code: "c", Err: "e"}})
					require.NoError(t, err)
					partial = b.Partial
				}
				st.Close()
			}
			require.Equal(t, append(ids, late...), got)

			// A stream of one tick, read in pieces with a move after each.
			more := relaytest.Emit(t, pool, "s", 5)
			_, made, err = s.Tick(ctx, tk, time.Hour)
			require.NoError(t, err)
			require.True(t, made)
			st, ok, err := s.Stream(ctx, token, cur, 1)
			require.NoError(t, err)
			require.True(t, ok)
			got = nil
			for {
				b, err := st.Next(2)
				require.NoError(t, err)
				for _, ev := range b.Events {
					got = append(got, ev.Event.ID)
				}
				cur, err = s.Move(ctx, token, cur, b, nil, nil)
				require.NoError(t, err)
				if !b.Partial {
					break
				}
			}
			st.Close()
			require.Equal(t, more, got)
			keys, err := s.ParkedKeys(ctx, "g")
			require.NoError(t, err)
			require.Equal(t, map[string]bool{"k": true}, keys)
			_, err = s.Lag(ctx, "g")
			require.NoError(t, err)
			_, err = pool.Exec(ctx, `UPDATE `+relaytest.LogName+`_parked_keys SET replay_requested_at = now()`)
			require.NoError(t, err)
			reqs, err := s.Requests(ctx, "g")
			require.NoError(t, err)
			require.Equal(t, []store.Request{{Key: "k"}}, reqs)
			replay, err := s.ParkedEvents(ctx, "g", []string{"k", "late"})
			require.NoError(t, err)
			require.Len(t, replay, 4)
			require.NoError(t, s.Settle(ctx, token, cur, store.Outcome{Unpark: []string{"k"}, Clear: []string{"late"}}))
			require.NoError(t, s.StopGroup(ctx, "g", token, "test"))
			require.NoError(t, s.ReleaseTicker(ctx, tk))
		})
	}
}
