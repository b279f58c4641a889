package natspub

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// ErrAckTimeout is the cause reported for a message whose PubAck did not
// arrive within Config.AckTimeout. It is retryable: the message may or may
// not be stored, and the stream's deduplication absorbs a re-publish
// within its duplicate window.
var ErrAckTimeout = errors.New("natspub: no PubAck within the ack timeout")

// permanentCause reports whether retrying cannot help a message that
// failed with err: no stream answers for its subject, it is larger than
// the server's max payload or the stream's max message size, the
// connection may not publish on its subject, or the subject or a header
// is malformed (the client refuses to encode it).
func permanentCause(err error) bool {
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, nats.ErrMaxPayload),
		errors.Is(err, nats.ErrPermissionViolation),
		errors.Is(err, nats.ErrBadSubject),
		errors.Is(err, nats.ErrBadHeaderMsg):
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum
}

// publishError wraps the cause of one message's failure, marked permanent
// when permanentCause says so. Its text holds the subject and the cause,
// never payload bytes or header values.
func publishError(subject string, cause error) error {
	err := fmt.Errorf("natspub: publish to %q: %w", subject, cause)
	if permanentCause(cause) {
		return outbox.Permanent(err)
	}
	return err
}

// streamLookup says whether some stream of the account captures subject. A
// failed lookup answers false.
type streamLookup func(ctx context.Context, subject string) bool

// lookupStream is the streamLookup of js.
func lookupStream(js jetstream.JetStream) streamLookup {
	return func(ctx context.Context, subject string) bool {
		_, err := js.StreamNameBySubject(ctx, subject)
		return err == nil
	}
}

// errStreamLeaderless replaces jetstream.ErrNoStreamResponse, which is
// permanent, when a stream does capture the subject: it exists but has no
// leader for the moment, which is worth a retry.
var errStreamLeaderless = errors.New("natspub: the stream for this subject exists but did not answer (no leader?)")

// deniedPublish reports whether the connection's last error is the
// server refusing a publish on subject. The server answers such a publish
// with no PubAck, only an asynchronous -ERR, so this is checked once the
// ack has timed out.
func deniedPublish(nc *nats.Conn, subject string) bool {
	if nc == nil {
		return false
	}
	last := nc.LastError()
	if last == nil || !errors.Is(last, nats.ErrPermissionViolation) {
		return false
	}
	return strings.Contains(strings.ToLower(last.Error()), strings.ToLower(`publish to "`+subject+`"`))
}
