package memory_test

import (
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/memory"
	"github.com/codeinterp/codeinterp/internal/store/storetest"
)

func TestUsageConformance(t *testing.T) {
	storetest.RunUsage(t, func(t *testing.T, now func() time.Time) store.Usage { return memory.NewUsage(now) })
}
