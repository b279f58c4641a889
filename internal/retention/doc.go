// Package retention is the dispatcher's retention job: it keeps the
// outbox's tables from growing without bound. Each pass, every
// RetentionInterval, moves the strays out of the outbox table
// (purge.Sweep), creates the SENT history's time partitions ahead of
// need, drops those older than RetainSent (unless KeepSent) with the rows
// of the history's default partition older than it, and deletes FAILED
// rows older than RetainFailed (when set), for at most half the interval;
// a drain its time cut short goes on at the next pass. EnsureAtStart
// creates the partitions once at start-up, before the first claim.
//
// # Inputs
//
// A Config: the pool, the table, the dispatcher's retention settings,
// the bound of one statement, the clock, the logger, and callbacks for
// its errors and its counters (passes, passes skipped, rows deleted by
// status) and a test hook after each batch. The SQL lives in
// internal/purge.
//
// # Who calls it
//
// The dispatcher: EnsureAtStart from its start-up checks
// (internal/startcheck's EnsurePartitionsFunc), and Run on a goroutine of
// its own beside dispatching, under a context that ends when the
// dispatcher stops its helpers, Stop is called or Run's context ends. Run
// uses one pool connection at a time and never a handler slot; its state
// (the unfinished drains, the warnings given) is owned by that goroutine,
// so the package has no lock. Between replicas, each deleting batch takes
// a transaction-level advisory lock (internal/purge).
package retention
