package pguuid

import (
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// Of returns id as a uuid parameter.
func Of(id uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

// Array is a uuid[] parameter. pgx encodes a FlatArray without
// reflection, element by element.
type Array = pgtype.FlatArray[pgtype.UUID]

// ArrayOf returns ids as a uuid[] parameter.
func ArrayOf(ids []uuid.UUID) Array {
	out := make(Array, len(ids))
	for i, id := range ids {
		out[i] = Of(id)
	}
	return out
}
