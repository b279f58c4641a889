package outbox

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// reservedHeaderPrefixes start the header names an event may not use, in
// any case: "ce_", "ce-" and "cloudEvents_" name the CloudEvents
// attributes publishers send the event's fields as (Kafka, NATS and AMQP
// bindings), "Nats-" the headers the NATS server acts on (Nats-Msg-Id,
// Nats-Rollup, …).
var reservedHeaderPrefixes = [...]string{"ce_", "ce-", "cloudEvents_", "Nats-"}

// reservedHeaderNames are the header names an event may not use, in any
// case: "Content-Type" carries the datacontenttype attribute on Kafka and
// tells a CloudEvents consumer the content mode on NATS; NATS clients take
// a message with an empty body and a "Status" header (and its
// "Description") for a server status or control message and never hand
// it to the application; RabbitMQ routes a message to the extra queues
// its "CC" and "BCC" headers name (and strips BCC).
var reservedHeaderNames = [...]string{"Content-Type", "Status", "Description", "CC", "BCC"}

// HeaderNameProblem says why name cannot be the name of an event header
// under the header rule (see the package documentation), or returns ""
// when it can. The reason quotes at most the offending byte.
func HeaderNameProblem(name string) string {
	if name == "" {
		return "is empty"
	}
	for _, prefix := range reservedHeaderPrefixes {
		if len(name) >= len(prefix) && strings.EqualFold(name[:len(prefix)], prefix) {
			return "starts with " + prefix + ", a reserved prefix (any case)"
		}
	}
	for _, reserved := range reservedHeaderNames {
		if strings.EqualFold(name, reserved) {
			return "is " + reserved + ", a reserved name (any case)"
		}
	}
	for i := range len(name) {
		if !isTokenChar(name[i]) {
			return fmt.Sprintf("holds %q at byte %d; a header name holds only ASCII letters, digits and !#$%%&'*+-.^_`|~", name[i], i)
		}
	}
	return ""
}

// HeaderValueProblem says why v cannot travel as a broker header value (a
// header's value, or a field sent as one) under the header rule (see the
// package documentation), or returns "" when it can. The reason never quotes v.
func HeaderValueProblem(v string) string {
	switch {
	case !utf8.ValidString(v):
		return "is not valid UTF-8"
	case strings.IndexByte(v, 0) >= 0:
		return "contains a NUL byte"
	case strings.ContainsAny(v, "\r\n"):
		return "contains CR or LF"
	case v != "" && (isSpaceOrTab(v[0]) || isSpaceOrTab(v[len(v)-1])):
		return "starts or ends with a space or a tab"
	}
	return ""
}

// HeaderProblem checks every field of e that publishers send as a broker
// header against the header rule. It returns the first field that breaks
// it ("Type", "AggregateType", "AggregateID", "PartitionKey",
// "IdempotencyKey", "ContentType" or "Headers") and why, or "", "" when
// every field follows it. Reasons may name a header but never quote a
// value. Lengths and counts are the emitter's limits, not checked here.
func HeaderProblem(e Event) (field, reason string) {
	fields := [...]struct{ name, value string }{
		{"Type", e.Type},
		{"AggregateType", e.AggregateType},
		{"AggregateID", e.AggregateID},
		{"PartitionKey", e.PartitionKey},
		{"IdempotencyKey", e.IdempotencyKey},
		{"ContentType", e.ContentType},
	}
	for _, f := range fields {
		if reason := HeaderValueProblem(f.value); reason != "" {
			return f.name, reason
		}
	}
	for name, value := range e.Headers {
		if reason := HeaderNameProblem(name); reason != "" {
			return "Headers", fmt.Sprintf("name %q %s", name, reason)
		}
		if reason := HeaderValueProblem(value); reason != "" {
			return "Headers", fmt.Sprintf("value of %q %s", name, reason)
		}
	}
	return "", ""
}

// isTokenChar reports whether c may appear in an RFC 9110 token, the form
// of a header name: a visible ASCII character other than a delimiter.
func isTokenChar(c byte) bool {
	return c > ' ' && c < 0x7f && !strings.ContainsRune(`"(),/:;<=>?@[\]{}`, rune(c))
}

func isSpaceOrTab(c byte) bool { return c == ' ' || c == '\t' }
