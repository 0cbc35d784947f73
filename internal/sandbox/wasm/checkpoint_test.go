package wasm_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/klauspost/compress/zstd"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/internal/checkpoint/checkpointtest"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/internal/sandbox/wasm"
)

func takeCheckpoint(t *testing.T, s sandbox.Session) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return s.Checkpoint(ctx)
}

// TestSessionCheckpoint: a session's variables, imports, seeded random
// state and /tmp, checkpointed between runs, come back in a new worker
// process restored from it; the checkpointed session goes on unharmed, and
// a restored one can be checkpointed again.
func TestSessionCheckpoint(t *testing.T) {
	p := sandboxtest.New(t)
	ctx := context.Background()
	a, err := p.Open(ctx, sandbox.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	runOK(t, a, "x = 41\nimport json, random\nrandom.seed(7)\nwith open('/tmp/notes.txt', 'w') as f: f.write('kept')\nbig = list(range(200000))")
	state, err := takeCheckpoint(t, a)
	if err != nil || len(state) == 0 {
		t.Fatalf("Checkpoint: %d bytes, %v", len(state), err)
	}
	t.Logf("checkpoint of a session holding a 200 000-int list: %d bytes", len(state))
	want := runOK(t, a, "print(random.random())")
	if got := runOK(t, a, "x += 100\nprint(x)"); got != "141" {
		t.Fatalf("the checkpointed session went on with x = %q, want 141", got)
	}

	b, err := p.Open(ctx, sandbox.SessionOptions{Restore: state})
	if err != nil {
		t.Fatalf("Open with Restore: %v", err)
	}
	defer b.Close()
	if wa, wb := a.(interface{ WorkerPID() int }).WorkerPID(), b.(interface{ WorkerPID() int }).WorkerPID(); wa == wb || wb == 0 {
		t.Fatalf("the restored session runs in worker %d, the original in %d: want another process", wb, wa)
	}
	if got := runOK(t, b, "print(x + 1, open('/tmp/notes.txt').read(), json.dumps([len(big)]))"); got != "42 kept [200000]" {
		t.Fatalf("restored session printed %q, want the checkpoint's state", got)
	}
	if got := runOK(t, b, "print(random.random())"); got != want {
		t.Fatalf("restored random state gave %q, the original %q", got, want)
	}
	again, err := takeCheckpoint(t, b)
	if err != nil {
		t.Fatalf("checkpoint of a restored session: %v", err)
	}
	c, err := p.Open(ctx, sandbox.SessionOptions{Restore: again})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := runOK(t, c, "print(x)"); got != "41" {
		t.Fatalf("a restore of a restore printed %q, want 41", got)
	}
}

// TestSessionCheckpointRefusals: what cannot be checkpointed or restored
// is refused with ErrNoCheckpoint, and nothing is harmed: the session goes
// on, the pool opens fresh sessions.
func TestSessionCheckpointRefusals(t *testing.T) {
	p := sandboxtest.New(t)
	ctx := context.Background()
	s, err := p.Open(ctx, sandbox.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	runOK(t, s, "y = 5\nf = open('/tmp/held.txt', 'w')\nf.write('a')")
	if _, err := takeCheckpoint(t, s); !errors.Is(err, sandbox.ErrNoCheckpoint) || !strings.Contains(err.Error(), "open files") {
		t.Fatalf("Checkpoint with a file held open: %v, want ErrNoCheckpoint naming open files", err)
	}
	if got := runOK(t, s, "f.write('b'); f.close()\nprint(y, open('/tmp/held.txt').read())"); got != "5 ab" {
		t.Fatalf("after a refused checkpoint the session printed %q", got)
	}
	state, err := takeCheckpoint(t, s)
	if err != nil {
		t.Fatalf("Checkpoint once the file is closed: %v", err)
	}

	flip := func(i int) []byte {
		c := bytes.Clone(state)
		c[i] ^= 0xff
		return c
	}
	for name, bad := range map[string][]byte{
		"truncated":          state[:len(state)/2],
		"a byte flipped":     flipThatChanges(t, state, len(state)/2),
		"its header flipped": flip(5),
		"not a state":        []byte("x = 41"),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := p.Open(ctx, sandbox.SessionOptions{Restore: bad})
			if !errors.Is(err, sandbox.ErrNoCheckpoint) {
				t.Fatalf("Open with a %s state: %v, want ErrNoCheckpoint", name, err)
			}
		})
	}
	fresh, err := p.Open(ctx, sandbox.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if got := runOK(t, fresh, "print('y' in dir())"); got != "False" {
		t.Fatalf("a fresh session after refused restores printed %q", got)
	}
}

// flipThatChanges returns state with one byte flipped, the first from
// index from on whose flip changes what the state decodes to (or makes
// it undecodable). zstd is not canonical: a flip in, say, a match offset
// can decode to the very same bytes (about 0.15 % of single-byte flips),
// which the frame's checksum rightly passes and which restore the same
// session; such a flip proves nothing about the integrity check, so it
// is skipped, and the one returned must be refused.
func flipThatChanges(t *testing.T, state []byte, from int) []byte {
	t.Helper()
	want, err := decodedHash(state)
	if err != nil {
		t.Fatalf("the checkpoint does not decode: %v", err)
	}
	for i := from; i < len(state); i++ {
		c := bytes.Clone(state)
		c[i] ^= 0xff
		if got, err := decodedHash(c); err != nil || got != want {
			if i != from {
				t.Logf("flips of bytes %d to %d decode to the same state; byte %d's does not", from, i-1, i)
			}
			return c
		}
	}
	t.Fatalf("no flip of a byte from %d on changes what the state decodes to", from)
	return nil
}

// decodedHash is a hash of what a zstd frame decodes to, decoded as the
// worker decodes a state (its memory bound, one goroutine).
func decodedHash(b []byte) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	zr, err := zstd.NewReader(bytes.NewReader(b), zstd.WithDecoderMaxMemory(5<<30), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return sum, err
	}
	defer zr.Close()
	h := sha256.New()
	if _, err := io.Copy(h, zr); err != nil {
		return sum, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// TestSessionCheckpointColdStart: workers that start CPython cold have no
// snapshot to restore over: a restore is refused, not turned into a fresh
// interpreter.
func TestSessionCheckpointColdStart(t *testing.T) {
	cfg := sandboxtest.Config(t)
	cfg.ColdStart = true
	cfg.WarmWorkers = 0
	p, err := wasm.New(context.Background(), cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = p.Open(context.Background(), sandbox.SessionOptions{Restore: []byte("state")})
	if !errors.Is(err, sandbox.ErrNoCheckpoint) {
		t.Fatalf("a restore on cold-start workers: %v, want ErrNoCheckpoint", err)
	}
}

// TestSessionCheckpointOtherSnapshot: a state taken over one server's
// snapshot restores on a server that took its own (another replica, or
// this one after a restart or a rotation), which fetches the base from
// Bases; without Bases it is refused, not restored over the wrong memory.
func TestSessionCheckpointOtherSnapshot(t *testing.T) {
	bases := checkpointtest.Keeper(t, t.TempDir(), checkpointtest.Key(t), "wasm/test", 0)
	start := func(b wasm.Bases) *pool.Pool {
		cfg := sandboxtest.Config(t)
		cfg.ReuseSnapshot, cfg.SnapshotDir, cfg.Bases = false, t.TempDir(), b
		p, err := wasm.New(context.Background(), cfg, zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	a := start(bases)
	s, err := a.Open(context.Background(), sandbox.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	runOK(t, s, "z = 'made on a'")
	state, err := takeCheckpoint(t, s)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	a.Close() // its snapshot is gone with it

	for _, tc := range []struct {
		name  string
		bases wasm.Bases
	}{{"with bases", bases}, {"without bases", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			b := start(tc.bases)
			r, err := b.Open(context.Background(), sandbox.SessionOptions{Restore: state})
			if tc.bases == nil {
				if !errors.Is(err, sandbox.ErrNoCheckpoint) {
					t.Fatalf("without bases: %v, want ErrNoCheckpoint", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("restore over another server's snapshot: %v", err)
			}
			defer r.Close()
			if got := runOK(t, r, "print(z)"); got != "made on a" {
				t.Fatalf("restored %q", got)
			}
			// A checkpoint over the fetched base (in Bases: it is not
			// waited for) restores too.
			runOK(t, r, "z += ', then b'")
			again, err := takeCheckpoint(t, r)
			if err != nil {
				t.Fatalf("a checkpoint over a fetched base: %v", err)
			}
			r2, err := b.Open(context.Background(), sandbox.SessionOptions{Restore: again})
			if err != nil {
				t.Fatalf("restoring a checkpoint over a fetched base: %v", err)
			}
			defer r2.Close()
			if got := runOK(t, r2, "print(z)"); got != "made on a, then b" {
				t.Fatalf("restored %q", got)
			}
		})
	}
}
