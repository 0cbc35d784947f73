package sandboxtest_test

import (
	"testing"

	"github.com/codeinterp/codeinterp/sandbox/sandboxtest"
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
}
