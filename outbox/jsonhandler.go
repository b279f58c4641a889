package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// JSONHandler returns a Handler that decodes each event's payload as JSON
// into a fresh T and calls fn with it. A payload that does not decode
// (not JSON, or JSON that does not fit T) fails the event at once with a
// [Permanent] error, since no retry can change the payload; the error
// names T and what went wrong where, never the payload's bytes. fn's own
// error decides the outcome as any handler's does.
func JSONHandler[T any](fn func(ctx context.Context, e Event, v T) error) Handler {
	return func(ctx context.Context, e Event) error {
		var v T
		if err := json.Unmarshal(e.Payload, &v); err != nil {
			return Permanent(fmt.Errorf("pgoutbox: payload of event %s does not decode as JSON into %T: %s",
				e.ID, v, jsonProblem(err)))
		}
		return fn(ctx, e, v)
	}
}

// jsonProblem describes a decoding error without the text of
// encoding/json's own messages, some of which quote the input (a number's
// value, a character).
func jsonProblem(err error) string {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Sprintf("syntax error at byte %d", syntax.Offset)
	case errors.As(err, &typ):
		kind, _, _ := strings.Cut(typ.Value, " ") // "number 5": keep the kind only
		return fmt.Sprintf("a JSON %s cannot go into a value of type %s (at byte %d)", kind, typ.Type, typ.Offset)
	}
	return fmt.Sprintf("%T", err) // an UnmarshalJSON method's error may quote the input
}
