package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/memory"
	"github.com/codeinterp/codeinterp/internal/store/storetest"
)

func newStore(t *testing.T, l store.Limits, now func() time.Time) store.Store {
	s := memory.New(l, now)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) { storetest.Run(t, newStore) }

// TestSweepForgets checks the sweeper's pass drops expired containers and
// Files API files without anyone touching them.
func TestSweepForgets(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Start())
	l := store.DefaultLimits()
	l.ExpiredMemory = time.Minute
	s := memory.New(l, clock.Now)
	defer s.Close()
	now := clock.Now().Unix()
	c := store.Container{ID: idgen.New("cntr_"), Owner: "o_a", CreatedAt: now, LastActiveAt: now, ExpiresAfterMinutes: 1}
	if err := s.PutContainer(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutFile(ctx, store.File{Owner: "o_a", Filename: "f", ExpiresAt: now + 30}, []byte("x")); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute)
	s.Sweep()
	if n := s.Owners(); n != 0 {
		t.Errorf("%d owners after the sweep, want 0", n)
	}
}

func TestCloseIdempotent(t *testing.T) {
	s := memory.New(store.DefaultLimits(), nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
