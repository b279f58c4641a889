package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
)

const (
	watermillTopic     = "bench_events"
	watermillForwarder = "bench_forwarder"
)

// sink is the no-op consumer the forwarder publishes to: it counts distinct
// message UUIDs and closes done when it has seen want of them.
type sink struct {
	mu   sync.Mutex
	seen map[string]struct{}
	dups int
	want int
	done chan struct{}
}

func newSink(want int) *sink {
	return &sink{seen: make(map[string]struct{}, want), want: want, done: make(chan struct{})}
}

// Publish records the messages and drops them.
func (s *sink) Publish(_ string, msgs ...*message.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		if _, ok := s.seen[m.UUID]; ok {
			s.dups++
			continue
		}
		s.seen[m.UUID] = struct{}{}
		if len(s.seen) == s.want {
			close(s.done)
		}
	}
	return nil
}

// Close does nothing.
func (s *sink) Close() error { return nil }

// runWatermill drains N messages through watermill-sql's forwarder (the
// PostgreSQL schema and offsets adapters, SubscribeBatchSize = Batch) into a
// no-op publisher.
func runWatermill(ctx context.Context, o Options) (Result, error) {
	if o.Mode != "" && o.Mode != "forward" {
		return Result{}, fmt.Errorf("unknown mode %q (forward)", o.Mode)
	}
	db, err := openDB(ctx, o.URL, 8)
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	schema := wsql.DefaultPostgreSQLSchema{SubscribeBatchSize: o.Batch}
	if err := watermillPreload(ctx, db, schema, o); err != nil {
		return Result{}, err
	}
	out := newSink(o.N)
	elapsed, err := watermillDrain(ctx, db, schema, out)
	if err != nil {
		return Result{}, err
	}
	res := throughput("forward", o.N, elapsed)
	res.Params = map[string]any{"batch": o.Batch, "conns": 8, "duplicates": out.dups}
	res.Verified = len(out.seen) == o.N
	return res, nil
}

// watermillPreload publishes N enveloped messages to the forwarder topic,
// 1,000 per INSERT.
func watermillPreload(ctx context.Context, db *benchDB, schema wsql.DefaultPostgreSQLSchema, o Options) error {
	pub, err := wsql.NewPublisher(wsql.BeginnerFromPgx(db.pool),
		wsql.PublisherConfig{SchemaAdapter: schema, AutoInitializeSchema: true}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	fpub := forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: watermillForwarder})
	body := payload(o.Payload)
	for done := 0; done < o.N; {
		msgs := make([]*message.Message, min(1000, o.N-done))
		for i := range msgs {
			msgs[i] = message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf("%q", body)))
		}
		if err := fpub.Publish(watermillTopic, msgs...); err != nil {
			return err
		}
		done += len(msgs)
	}
	_, err = db.pool.Exec(ctx, `VACUUM ANALYZE "watermill_`+watermillForwarder+`"`)
	return err
}

// watermillDrain runs the forwarder until out has every message, and
// returns the time from start to then.
func watermillDrain(ctx context.Context, db *benchDB, schema wsql.DefaultPostgreSQLSchema, out *sink) (time.Duration, error) {
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(db.pool), wsql.SubscriberConfig{
		SchemaAdapter: schema, OffsetsAdapter: wsql.DefaultPostgreSQLOffsetsAdapter{}, InitializeSchema: true,
	}, watermill.NopLogger{})
	if err != nil {
		return 0, err
	}
	fwd, err := forwarder.NewForwarder(sub, out, watermill.NopLogger{}, forwarder.Config{ForwarderTopic: watermillForwarder})
	if err != nil {
		return 0, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	runErr := make(chan error, 1)
	go func() { runErr <- fwd.Run(runCtx) }()
	select {
	case <-out.done:
	case err := <-runErr:
		return 0, fmt.Errorf("forwarder stopped early: %w", err)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	elapsed := time.Since(start)
	if err := fwd.Close(); err != nil {
		return 0, err
	}
	return elapsed, sub.Close()
}
