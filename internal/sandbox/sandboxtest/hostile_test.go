package sandboxtest_test

import (
	"testing"

	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
)

func TestMain(m *testing.M) { sandboxtest.Main(m) }

// TestHostileCorpus runs the one hostile corpus against every provider.
func TestHostileCorpus(t *testing.T) {
	for _, provider := range sandboxtest.Providers() {
		t.Run(provider, func(t *testing.T) {
			p := sandboxtest.NewProvider(t, provider, sandboxtest.HostileLimits(provider))
			sandboxtest.RunHostile(t, p, provider)
		})
	}
	// WASM sessions restored from the snapshot in processes that serve
	// several sessions of one owner in turn: every hostile program runs
	// where earlier ones ran.
	t.Run("wasm-sessions_per_worker-4", func(t *testing.T) {
		limits := sandboxtest.HostileLimits("wasm")
		p := sandboxtest.NewProvider(t, "wasm", func(c *pool.Config) {
			limits(c)
			c.SessionsPerWorker = 4
		})
		sandboxtest.RunHostileAs(t, p, "wasm", "hostile-owner")
	})
}
