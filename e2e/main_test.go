package e2e

import (
	"os"
	"testing"

	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
)

// TestMain lets this test binary double as a sandbox worker. The servers
// the tests start keep their container checkpoints (on by default) in a
// directory of this run, removed after it, not in the user's cache,
// unless the run names one.
func TestMain(m *testing.M) {
	sandboxtest.Main(m, func() func() {
		if _, ok := os.LookupEnv("CODEINTERP_CHECKPOINTS_DIR"); ok {
			return func() {}
		}
		dir, err := os.MkdirTemp("", "codeinterp-e2e-checkpoints-")
		if err != nil {
			panic(err)
		}
		os.Setenv("CODEINTERP_CHECKPOINTS_DIR", dir)
		return func() { os.RemoveAll(dir) }
	})
}
