package pgerr

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/outbox"
)

func TestCode(t *testing.T) {
	require.Equal(t, QueryCanceled, Code(fmt.Errorf("claim: %w", &pgconn.PgError{Code: QueryCanceled})))
	require.Empty(t, Code(errors.New("not from PostgreSQL")))
	require.Empty(t, Code(nil))
}

// Only a 42P01 of the statement itself is about the caller's table: one
// raised inside a trigger or function carries a context (Where) or an
// internal query.
func TestOwnMissingTable(t *testing.T) {
	require.True(t, OwnMissingTable(fmt.Errorf("emit: %w", &pgconn.PgError{Code: UndefinedTable})))
	require.False(t, OwnMissingTable(&pgconn.PgError{Code: UndefinedTable,
		Where: "PL/pgSQL function to_audit() line 1 at SQL statement"}))
	require.False(t, OwnMissingTable(&pgconn.PgError{Code: UndefinedTable, InternalQuery: "SELECT 1 FROM audit"}))
	require.False(t, OwnMissingTable(&pgconn.PgError{Code: UniqueViolation}))
	require.False(t, OwnMissingTable(errors.New("not from PostgreSQL")))
}

func TestTxUnusable(t *testing.T) {
	for _, err := range []error{pgx.ErrTxClosed, fmt.Errorf("x: %w", &pgconn.PgError{Code: InFailedTx})} {
		txErr := TxUnusable(err)
		require.NotNil(t, txErr)
		require.Equal(t, "tx", txErr.Field)
		require.ErrorIs(t, txErr, outbox.ErrTxDone)
		require.ErrorIs(t, txErr, outbox.ErrInvalidInput)
		require.NotErrorIs(t, txErr, outbox.ErrInvalidEvent)
	}
	require.Nil(t, TxUnusable(&pgconn.PgError{Code: UndefinedColumn}))
}

func TestIsNil(t *testing.T) {
	var tx *pgxpool.Tx
	var iface pgx.Tx = tx
	require.True(t, IsNil(nil))
	require.True(t, IsNil(iface))
	require.False(t, IsNil(&pgxpool.Tx{}))
}
