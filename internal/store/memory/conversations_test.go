package memory_test

import (
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/memory"
	"github.com/codeinterp/codeinterp/internal/store/storetest"
)

// TestConversationsConformance runs the shared Conversations suite on the
// in-process store.
func TestConversationsConformance(t *testing.T) {
	storetest.RunConversations(t, func(t *testing.T, l store.ConversationLimits, now func() time.Time) store.Conversations {
		return memory.NewConversations(l, now)
	})
}
