package interceptor

import (
	"testing"

	"github.com/codeinterp/codeinterp/internal/fixtures"
)

// The recorded OpenAI traffic the conformance tests compare against:
// package internal/fixtures hands out the project's turns built from the
// recordings' shapes (testdata/openai), and the recordings themselves
// when CODEINTERP_FIXTURES is set.
const (
	fixtureNonStreaming = fixtures.CINonStreaming
	fixtureStreaming    = fixtures.CIStreaming
	fixtureFunctionTool = fixtures.FunctionTool
)

// sseEvent and parseSSE: the one parser of the tests' event streams.
type sseEvent = fixtures.Event

func parseSSE(t testing.TB, stream string) []sseEvent {
	t.Helper()
	return fixtures.ParseSSE(t, stream)
}

func tail(s string) string {
	if len(s) > 80 {
		return s[len(s)-80:]
	}
	return s
}
