package inbox

import (
	"errors"
	"fmt"

	"github.com/google/uuid"
)

// ErrContentMismatch is the root of every [*ConflictError]: the event ID was
// already recorded for the consumer with a different type or payload.
var ErrContentMismatch = errors.New("pgoutbox: inbox: event ID reused with different content")

// ConflictError reports that an event ID was already recorded for a
// consumer with different content (type or payload). The consumer's work was
// not run. It names the consumer and event but carries neither payload nor
// hash.
type ConflictError struct {
	// Consumer is the consumer name the event was processed under.
	Consumer string
	// EventID is the reused event ID.
	EventID uuid.UUID
}

// Error implements error.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("pgoutbox: inbox: event %s was already processed by consumer %q with different content", e.EventID, e.Consumer)
}

// Unwrap returns ErrContentMismatch.
func (e *ConflictError) Unwrap() error { return ErrContentMismatch }
