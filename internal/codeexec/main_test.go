package codeexec_test

import (
	"testing"

	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
)

// TestMain lets the test binary double as the sandbox's launcher.
func TestMain(m *testing.M) { sandboxtest.Main(m) }
