package sse

import (
	"testing"

	"github.com/codeinterp/codeinterp/internal/fixtures"
)

// sseEvent and parseSSE: the one parser of the tests' event streams.
type sseEvent = fixtures.Event

func parseSSE(t testing.TB, stream string) []sseEvent {
	t.Helper()
	return fixtures.ParseSSE(t, stream)
}
