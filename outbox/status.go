package outbox

// Status is the state of an event row. The database stores it as text with a
// CHECK constraint that allows exactly these four values.
type Status string

// The statuses an event row moves through; see the package documentation for
// the transitions.
const (
	// StatusPending marks an event waiting for its first attempt or for a
	// retry whose time (next_attempt_at, database clock) has come.
	StatusPending Status = "PENDING"
	// StatusProcessing marks an event claimed by a dispatcher that holds an
	// unexpired, token-fenced lease on it.
	StatusProcessing Status = "PROCESSING"
	// StatusSent marks an event that its handlers or publisher acknowledged.
	// Downstream work may still fail; the outbox's part is done.
	StatusSent Status = "SENT"
	// StatusFailed marks the dead letter: the retry budget is spent, the
	// error was permanent, nothing handles the event, or at-most-once
	// delivery lost its lease. Operators may replay it.
	StatusFailed Status = "FAILED"
)

// Statuses lists every status in the order of the life of an event.
func Statuses() []Status {
	return []Status{StatusPending, StatusProcessing, StatusSent, StatusFailed}
}

// Valid reports whether s is one of the four statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusPending, StatusProcessing, StatusSent, StatusFailed:
		return true
	}
	return false
}

// String returns the status as stored in the database.
func (s Status) String() string { return string(s) }
