package memory_test

import (
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/memory"
	"github.com/codeinterp/codeinterp/internal/store/storetest"
)

// TestSkillsConformance runs the shared Skills suite on the in-process
// store.
func TestSkillsConformance(t *testing.T) {
	storetest.RunSkills(t, func(t *testing.T, l store.SkillLimits, now func() time.Time) store.Skills {
		return memory.NewSkills(l, now)
	})
}
