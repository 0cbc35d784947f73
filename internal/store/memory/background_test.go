package memory_test

import (
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/memory"
	"github.com/codeinterp/codeinterp/internal/store/storetest"
)

func TestBackgroundConformance(t *testing.T) {
	storetest.RunBackground(t, func(t *testing.T, now func() time.Time) store.Background {
		return memory.NewBackground(now)
	})
}
