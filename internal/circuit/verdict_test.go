package circuit

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgoutbox/pgoutbox/outbox"
)

func TestVerdict(t *testing.T) {
	down := outbox.Unavailable(errors.New("broker down"))
	other := errors.New("refused")
	skip := outbox.ErrNotAttempted
	for _, c := range []struct {
		name            string
		errs            []error
		outage, reached bool
	}{
		{"nothing attempted", []error{skip, skip}, false, false},
		{"empty", nil, false, false},
		{"all unavailable", []error{down, skip, down}, true, false},
		{"one acked", []error{down, nil}, false, true},
		{"one refused", []error{other, down}, false, true},
	} {
		outage, reached, cause := Verdict(c.errs)
		require.Equal(t, c.outage, outage, c.name)
		require.Equal(t, c.reached, reached, c.name)
		require.Equal(t, c.outage, cause != nil, c.name)
	}
}
