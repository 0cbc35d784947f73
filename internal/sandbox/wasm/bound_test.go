package wasm_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
)

// TestCheckpointBound (issue 37, row 6): a session's state above the
// checkpoint bound (checkpoints.max_bytes: pool.Limits.CheckpointBytes)
// is refused as too large — the worker stops writing it once it passes
// the bound — and the session goes on in the same interpreter, its
// variables intact; a state within the bound is taken.
func TestCheckpointBound(t *testing.T) {
	const bound = 2 << 20
	p := sandboxtest.New(t, func(c *pool.Config) { c.Limits.CheckpointBytes = bound })
	ctx := context.Background()

	small, err := p.Open(ctx, sandbox.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	runOK(t, small, "x = 1")
	state, err := takeCheckpoint(t, small)
	if err != nil {
		t.Fatalf("a small session's checkpoint under a %d-byte bound: %v", bound, err)
	}
	if len(state) > bound {
		t.Fatalf("a %d-byte state under a %d-byte bound", len(state), bound)
	}
	t.Logf("a small session's state: %d bytes", len(state))

	big, err := p.Open(ctx, sandbox.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	runOK(t, big, "import os\nblob = os.urandom(8 << 20)\nx = 5")
	_, err = takeCheckpoint(t, big)
	if !errors.Is(err, sandbox.ErrNoCheckpoint) || !errors.Is(err, sandbox.ErrTooLarge) || !strings.Contains(err.Error(), "max_bytes") {
		t.Fatalf("the checkpoint of 8 MiB of random bytes under a %d-byte bound: %v, want ErrNoCheckpoint and ErrTooLarge naming max_bytes", bound, err)
	}
	if got := runOK(t, big, "print(x, len(blob))"); got != "5 8388608" || big.Generation() != 1 {
		t.Fatalf("after a refused checkpoint the session printed %q (generation %d), want its state", got, big.Generation())
	}
}

// TestCheckpointBeyondAFrame: with no bound set, a state larger than one
// message between worker and server carries is refused as too large,
// and the worker and its session live on (it used to fail to send it,
// and exit).
func TestCheckpointBeyondAFrame(t *testing.T) {
	p := sandboxtest.New(t)
	s, err := p.Open(context.Background(), sandbox.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	runOK(t, s, "import os\nblob = os.urandom(60 << 20)\nx = 5")
	_, err = takeCheckpoint(t, s)
	if !errors.Is(err, sandbox.ErrNoCheckpoint) || !errors.Is(err, sandbox.ErrTooLarge) {
		t.Fatalf("the checkpoint of 60 MiB of random bytes: %v, want ErrNoCheckpoint and ErrTooLarge", err)
	}
	if got := runOK(t, s, "print(x, len(blob))"); got != "5 62914560" || s.Generation() != 1 {
		t.Fatalf("after a refused checkpoint the session printed %q (generation %d), want its state", got, s.Generation())
	}
}
