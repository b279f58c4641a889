package emitter

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHasNULEscape(t *testing.T) {
	t.Parallel()
	for doc, want := range map[string]bool{
		`"\u0000"`:        true,
		`{"a":"x\u0000"}`: true,
		`"\\u0000"`:       false, // escaped backslash, then the text u0000
		`"\\\u0000"`:      true,  // escaped backslash, then the escape
		`"\u00001"`:       true,
		`"\u0001"`:        false,
		`"u0000"`:         false,
		`"\"\u0000"`:      true,
		`"\\"`:            false,
	} {
		require.Equal(t, want, hasNULEscape([]byte(doc)), doc)
	}
}

func TestHeadersJSON(t *testing.T) {
	t.Parallel()
	require.Equal(t, "{}", headersJSON(nil, nil))
	require.JSONEq(t, `{"a\"b":"c\\d\t\u001f<ü>"}`, headersJSON(map[string]string{"a\"b": "c\\d\t\x1f<ü>"}, nil))

	th := map[string]string{HeaderTraceparent: "00-t", HeaderTracestate: "s=1"}
	require.JSONEq(t, `{"traceparent":"00-t","tracestate":"s=1"}`, headersJSON(nil, th))
	require.JSONEq(t, `{"a":"1","traceparent":"00-t","tracestate":"s=1"}`,
		headersJSON(map[string]string{"a": "1", HeaderTracestate: "own"}, th), "the span's tracestate wins")
	require.JSONEq(t, `{"traceparent":"own"}`, headersJSON(map[string]string{HeaderTraceparent: "own"}, th),
		"an event's own traceparent keeps the span's headers out")
}

func TestIsJSON(t *testing.T) {
	t.Parallel()
	for ct, want := range map[string]bool{
		"application/json":                  true,
		"Application/JSON":                  true,
		"application/json; charset=utf-8":   true,
		" application/json ;charset=\"bad":  true,
		"application/cloudevents+json":      true,
		"application/vnd.api+json; v=1":     true,
		"":                                  false,
		"+json":                             false,
		"application/jsonx":                 false,
		"application/x-protobuf":            false,
		"text/plain; note=application/json": false,
	} {
		require.Equal(t, want, isJSON(ct), ct)
	}
}
