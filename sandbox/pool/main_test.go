package pool_test

import (
	"testing"

	"github.com/codeinterp/codeinterp/sandbox/sandboxtest"
)

func TestMain(m *testing.M) { sandboxtest.Main(m) }
