package pgvalue

import (
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// UUID returns id as a uuid parameter.
func UUID(id uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

// UUIDArray is a uuid[] parameter. pgx encodes a FlatArray without
// reflection, element by element.
type UUIDArray = pgtype.FlatArray[pgtype.UUID]

// UUIDs returns ids as a uuid[] parameter.
func UUIDs(ids []uuid.UUID) UUIDArray {
	out := make(UUIDArray, len(ids))
	for i, id := range ids {
		out[i] = UUID(id)
	}
	return out
}
