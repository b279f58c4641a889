package wakeup

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// State is a change of the listener that StateFunc hears of.
type State int

const (
	// Probing: the listener is connecting and proving that notifications
	// arrive.
	Probing State = iota
	// Listening: connected and listening; the dispatcher triggers a claim
	// cycle to pick up what was committed while it was not.
	Listening
	// Closed: the listening connection ended (lost, or quit ended); a
	// Reconnecting or Unavailable follows unless quit ended.
	Closed
	// Reconnecting: the connection was lost or could not be made;
	// reconnecting with backoff.
	Reconnecting
	// Unavailable: the probe failed or the server refused the listener
	// (Require, or Auto): polling only.
	Unavailable
)

// Config is what the listener needs.
type Config struct {
	// ConnConfig configures the dedicated LISTEN connection.
	ConnConfig *pgx.ConnConfig
	// Pool sends the probe's notification.
	Pool *pgxpool.Pool
	// Channel is the table's wake-up channel, which the listener LISTENs
	// to.
	Channel string
	// Auto is true in WakeupAuto mode: when notifications do not arrive,
	// or the server refuses the listener with an error that retrying will
	// not fix (RefusedFunc), the listener gives up (Unavailable) instead
	// of reconnecting.
	Auto bool
	// ConnectTimeout bounds connecting and LISTENing.
	ConnectTimeout time.Duration
	// ProbeTimeout bounds the self-probe's wait for its notification.
	ProbeTimeout time.Duration
	// PingAfter is how long the listener waits for a notification before
	// it checks that its connection is alive.
	PingAfter time.Duration
	// Table and Owner name the dispatcher in the logs.
	Table, Owner string
	// Logger receives the warning that wake-ups are not working.
	Logger *slog.Logger
	// NotifyFunc receives the payload of each notification on Channel.
	NotifyFunc func(ctx context.Context, payload string)
	// StateFunc hears of each change of the listener's State.
	StateFunc func(ctx context.Context, s State)
	// ErrorFunc reports an error the listener recovers from (why says
	// what failed).
	ErrorFunc func(why string, err error)
	// RefusedFunc reports whether err is the server refusing, an SQL error
	// that retrying will not fix.
	RefusedFunc func(err error) bool
}

// Listener is the dispatcher's LISTEN connection: it wakes the dispatcher
// when events are emitted. It holds no state besides its Config: each
// connection lives in Run.
type Listener struct {
	cfg Config
}

// New returns a Listener of cfg; every field of cfg is needed.
func New(cfg Config) *Listener {
	return &Listener{cfg: cfg}
}
