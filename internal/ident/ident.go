package ident

import (
	"fmt"
	"strings"
)

// MaxLen is PostgreSQL's limit on identifiers and NOTIFY channel names
// (NAMEDATALEN - 1), in bytes.
const MaxLen = 63

// SuffixRoom is the length of the longest suffix the library adds to a
// table name to name the objects that belong to it ("_schema_version"):
// a table name may be at most MaxLen - SuffixRoom bytes long.
const SuffixRoom = len("_schema_version")

// MaxTableLen is the longest table name that leaves room for the suffixes.
const MaxTableLen = MaxLen - SuffixRoom

// Problem says why name is not a plain identifier, or returns "". A plain
// identifier is 1 to 63 bytes of lowercase ASCII letters, digits and
// underscores, not starting with a digit and not starting with "pg_"
// (reserved by PostgreSQL). Names are still quoted wherever SQL is built;
// the allow-list keeps them readable in psql and free of case surprises.
// The reason quotes nothing.
func Problem(name string) string {
	switch {
	case name == "":
		return "is empty"
	case len(name) > MaxLen:
		return fmt.Sprintf("is longer than %d bytes", MaxLen)
	case strings.HasPrefix(name, "pg_"):
		return "starts with the reserved prefix pg_"
	case name[0] >= '0' && name[0] <= '9':
		return "starts with a digit"
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return "may hold only a-z, 0-9 and _"
		}
	}
	return ""
}
