package pgvalue

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// TextProblem says why s cannot be stored as text of at most max bytes, or ""
// when it can. An empty s is fine here; callers that need a value check
// that themselves.
func TextProblem(s string, max int) string {
	switch {
	case len(s) > max:
		return fmt.Sprintf("is longer than %d bytes", max)
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL byte"
	}
	return ""
}
