package memory_test

import (
	"testing"

	"github.com/codeinterp/codeinterp/store"
	"github.com/codeinterp/codeinterp/store/memory"
	"github.com/codeinterp/codeinterp/store/storetest"
)

func BenchmarkResponses(b *testing.B) {
	storetest.BenchmarkResponses(b, memory.NewResponses(store.DefaultResponseLimits(), nil))
}
