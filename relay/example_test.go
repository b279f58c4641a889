package relay_test

import (
	"context"
	"errors"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/outbox"
	"github.com/pgoutbox/pgoutbox/relay"
)

// The relay publishes a log table's events for one consumer group until
// the program is interrupted. The log was migrated with
// migrations.Config{Kind: outbox.KindLog}, and the group created once.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	events := outbox.Table{Name: "events_log"}

	err = relay.CreateGroup(ctx, pool, events, "kafka", relay.Oldest)
	if err != nil && !errors.Is(err, relay.ErrGroupExists) {
		log.Fatal(err)
	}
	var publisher outbox.Publisher // kafkapub.New(...) or natspub.New(...)
	r, err := relay.New(relay.Config{Pool: pool, Log: events, Group: "kafka", Publisher: publisher})
	if err != nil {
		log.Fatal(err)
	}
	if err := r.Start(ctx); err != nil { // the start-up checks' error
		log.Fatal(err)
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Stop(stopCtx); err != nil { // the batch in flight finishes first
		log.Print(err)
	}
}
