package memory

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/store"
)

// TestBackgroundBytesBound: past the bound, the logs of the runs that
// ended longest ago are forgotten first; a running one's log is kept.
func TestBackgroundBytesBound(t *testing.T) {
	ctx := context.Background()
	b := NewBackground(nil)
	b.maxBytes = 3000
	event := make([]byte, 1000)
	for i := range 4 {
		id := fmt.Sprintf("resp_%d", i)
		if err := b.Begin(ctx, "o", id, 0, 0, time.Minute, time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := b.AppendEvent(ctx, "o", id, 0, event); err != nil {
			t.Fatal(err)
		}
		if i < 3 {
			if err := b.End(ctx, "o", id); err != nil {
				t.Fatal(err)
			}
		}
	}
	// 4000 bytes held: resp_0, which ended first, goes.
	if _, _, err := b.Events(ctx, "o", "resp_0", -1, 0); !errors.Is(err, store.ErrEventsTrimmed) {
		t.Fatalf("the oldest ended log: %v, want it trimmed", err)
	}
	for _, id := range []string{"resp_1", "resp_2", "resp_3"} {
		if ev, _, err := b.Events(ctx, "o", id, -1, 0); err != nil || len(ev) != 1 {
			t.Fatalf("%s: %d events, %v", id, len(ev), err)
		}
	}
}
