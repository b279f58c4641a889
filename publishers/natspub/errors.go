package natspub

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/pgoutbox/outbox"
)

// originError is an error of this adapter about one of pgoutbox's: it
// reads "<context>: <err>", context starting with "natspub" and err's
// text without its "pgoutbox: ", so the text names one origin; it unwraps
// to err.
type originError struct {
	context string
	err     error
}

func (e *originError) Error() string {
	return e.context + ": " + strings.TrimPrefix(e.err.Error(), "pgoutbox: ")
}

func (e *originError) Unwrap() error { return e.err }

// ErrAckTimeout is the cause reported for a message whose PubAck did not
// arrive within Config.AckTimeout. It is retryable: the message may or may
// not be stored, and the stream's deduplication absorbs a re-publish
// within its duplicate window.
var ErrAckTimeout = errors.New("natspub: no PubAck within the ack timeout")

// permanentCause reports whether retrying cannot help a message that
// failed with err: it is larger than the server's max payload or the
// stream's max message size, the connection may not publish on its
// subject, or the subject or a header is malformed (the client refuses to
// encode it). An outage is never permanent: no stream answering for the
// subject (jetstream.ErrNoStreamResponse, nats.ErrNoResponders: the
// stream is not created yet, or has no leader for the moment), a timeout,
// a lost or closed connection.
func permanentCause(err error) bool {
	switch {
	case errors.Is(err, nats.ErrMaxPayload),
		errors.Is(err, nats.ErrPermissionViolation),
		errors.Is(err, nats.ErrBadSubject),
		errors.Is(err, nats.ErrBadHeaderMsg):
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum
}

// unavailableCauses are the causes that say the server, or JetStream, did
// not answer, rather than anything about the message: no responders (no
// stream captures the subject, JetStream is off or not ready, or the
// stream has no leader: the server cannot tell these apart), a connection
// closed, draining, reconnecting or disconnected (with the server stopped,
// a publish is buffered for the reconnect and its PubAck times out), no
// server to connect to, JetStream not enabled, and PubAcks that do not
// come: one not within AckTimeout, or so many missing that the client
// refuses to send more.
var unavailableCauses = []error{
	jetstream.ErrNoStreamResponse,
	nats.ErrNoResponders,
	nats.ErrConnectionClosed,
	nats.ErrConnectionDraining,
	nats.ErrConnectionReconnecting,
	nats.ErrDisconnected,
	nats.ErrNoServers,
	nats.ErrTimeout,
	jetstream.ErrJetStreamNotEnabled,
	jetstream.ErrJetStreamNotEnabledForAccount,
	jetstream.ErrAsyncPublishTimeout,
	jetstream.ErrTooManyStalledMsgs,
	ErrAckTimeout,
}

// unavailableCause reports whether err is one of unavailableCauses. The
// jetstream client reports a publish on a closed connection as "nats: error
// creating async reply handler: nats: connection closed", formatted with
// %s rather than wrapped, so that text is matched too.
func unavailableCause(err error) bool {
	for _, cause := range unavailableCauses {
		if errors.Is(err, cause) {
			return true
		}
	}
	return strings.Contains(err.Error(), nats.ErrConnectionClosed.Error())
}

// publishError wraps the cause of one message's failure, marked permanent
// when permanentCause says so, unavailable when unavailableCause does. Its
// text holds the subject and the cause, never payload bytes or header
// values.
func publishError(subject string, cause error) error {
	if permanentCause(cause) {
		return outbox.Permanent(fmt.Errorf("natspub: publish to %q: %w", subject, cause))
	}
	err := fmt.Errorf("natspub: publish to %q: %w", subject, cause)
	if errors.Is(cause, jetstream.ErrNoStreamResponse) || errors.Is(cause, nats.ErrNoResponders) {
		err = fmt.Errorf("natspub: publish to %q: %w (no stream captures the subject yet, JetStream is not ready, "+
			"or the stream has no leader; retryable)", subject, cause)
	}
	if unavailableCause(cause) {
		return outbox.Unavailable(err)
	}
	return err
}

// checkSize returns nil when msg, message i of its call, fits within
// limit, the server's max_payload, which counts the encoded headers as
// well as the data; and otherwise an *outbox.ValidationError that names
// both sizes and the limit, wrapping nats.ErrMaxPayload. A limit of 0 (no
// server information yet) checks nothing: the client checks again once
// connected.
func checkSize(i int, msg *nats.Msg, limit int64) error {
	size := int64(msg.Size() - len(msg.Subject) - len(msg.Reply))
	if limit <= 0 || size <= limit {
		return nil
	}
	return &originError{context: fmt.Sprintf("natspub: publish to %q: too large for the server", msg.Subject), err: &outbox.ValidationError{
		Index: i, Field: "Payload", Err: nats.ErrMaxPayload,
		Reason: fmt.Sprintf("is %d bytes, %d with the message's headers, more than the server's max_payload of %d bytes",
			len(msg.Data), size, limit),
	}}
}

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
