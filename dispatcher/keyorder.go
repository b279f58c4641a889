package dispatcher

import "github.com/pgoutbox/pgoutbox/internal/startcheck"

// ErrNoOrderIndex is matched by the error Start returns when the
// dispatcher has Ordering PerKey, the outbox table has no valid per-key
// order index, and Start could not build it (the error is an
// *OrderIndexError). Since schema version 12 the index exists only where
// migrations.Config.KeyOrder is set or a PerKey dispatcher built it.
var ErrNoOrderIndex = startcheck.ErrNoOrderIndex

// OrderIndexError says that the outbox table lacks the per-key order
// index that Ordering PerKey reads (its claim probes each key's head
// through it), why Start did not build it, and how to build it. It
// matches ErrNoOrderIndex.
type OrderIndexError = startcheck.OrderIndexError
