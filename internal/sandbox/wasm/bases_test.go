package wasm_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/internal/sandbox/wasm"
	"github.com/codeinterp/codeinterp/internal/sandbox/worker"
)

// TestBaseKeptAtStart (issue 37, row 7): the snapshot a replica starts
// with goes up to Bases as the kind starts, before any checkpoint is
// taken; a checkpoint taken while that upload is still under way waits
// for it — its state is not handed out before its base is stored — and
// does not upload the base a second time, nor does the next one.
func TestBaseKeptAtStart(t *testing.T) {
	bases := newFakeBases()
	gate := make(chan struct{})
	bases.putGate = gate
	cfg := sandboxtest.Config(t)
	cfg.Bases = bases
	k, err := wasm.NewKind(cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := pool.New(ctx, cfg.Config, k, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	meta, err := worker.ReadSnapshotMeta(k.SnapshotDir())
	if err != nil {
		t.Fatal(err)
	}
	id := worker.SnapshotID(meta)

	// No session yet, no checkpoint: the upload has begun.
	select {
	case got := <-bases.putStarted:
		if got != id {
			t.Fatalf("PutBase(%q), want the snapshot's id %q", got, id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the snapshot was not put in Bases at start")
	}

	s, err := p.Open(context.Background(), sandbox.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	runOK(t, s, "x = 7")
	type result struct {
		state []byte
		err   error
	}
	done := make(chan result, 1)
	go func() {
		st, err := takeCheckpoint(t, s)
		done <- result{st, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("a checkpoint was handed out (%d bytes, %v) while its base's upload was under way", len(r.state), r.err)
	case <-time.After(500 * time.Millisecond):
	}
	close(gate) // the upload completes
	var r result
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the checkpoint did not return once its base was stored")
	}
	if r.err != nil || len(r.state) == 0 {
		t.Fatalf("Checkpoint: %d bytes, %v", len(r.state), r.err)
	}
	// Another checkpoint finds the base kept: no upload, no wait.
	start := time.Now()
	if _, err := takeCheckpoint(t, s); err != nil {
		t.Fatal(err)
	}
	t.Logf("a checkpoint over a base already kept took %s", time.Since(start))
	if got := bases.putCounts(); len(got) != 1 || got[id] != 1 {
		t.Fatalf("PutBase calls by id: %v, want one of %s", got, id)
	}
}

// TestBaseUploadRetried: when the upload at start failed, the first
// checkpoint tries again (once) and waits for it, so that its state is
// not handed out with no base in the store; later ones find it kept.
func TestBaseUploadRetried(t *testing.T) {
	bases := newFakeBases()
	bases.putFails = 1
	p := startWithBases(t, bases)
	select {
	case <-bases.putStarted: // the upload at start, which fails
	case <-time.After(30 * time.Second):
		t.Fatal("the snapshot was not put in Bases at start")
	}
	s, err := p.Open(context.Background(), sandbox.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	runOK(t, s, "x = 7")
	for range 2 {
		if _, err := takeCheckpoint(t, s); err != nil {
			t.Fatal(err)
		}
	}
	got := bases.putCounts()
	if len(got) != 1 {
		t.Fatalf("PutBase calls by id: %v, want one id", got)
	}
	for id, n := range got {
		if n != 2 {
			t.Fatalf("PutBase(%s) %d times, want 2 (the failed one at start, the first checkpoint's)", id, n)
		}
	}
}
