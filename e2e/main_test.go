package e2e

import (
	"testing"

	"github.com/codeinterp/codeinterp/sandbox/sandboxtest"
)

// TestMain lets this test binary double as a sandbox worker.
func TestMain(m *testing.M) { sandboxtest.Main(m) }
