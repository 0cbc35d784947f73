package memory_test

import (
	"testing"

	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/memory"
	"github.com/codeinterp/codeinterp/internal/store/storetest"
)

func BenchmarkResponses(b *testing.B) {
	storetest.BenchmarkResponses(b, memory.NewResponses(store.DefaultResponseLimits(), nil))
}
