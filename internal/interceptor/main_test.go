package interceptor

import (
	"testing"

	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
)

// TestMain lets the test binary double as the sandbox's worker process.
func TestMain(m *testing.M) { sandboxtest.Main(m) }
