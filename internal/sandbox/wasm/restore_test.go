package wasm_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/internal/checkpoint"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/internal/sandbox/wasm"
)

// fakeBases is a wasm.Bases that records what is put and answers
// GetBase with getBase.
type fakeBases struct {
	mu   sync.Mutex
	puts map[string]int // PutBase calls by id
	// putGate, when set, holds every PutBase until it is closed (or ctx
	// ends); putStarted receives once per PutBase as it begins.
	putGate    chan struct{}
	putStarted chan string
	putFails   int // the first putFails PutBase calls fail
	getBase    func(ctx context.Context, id string) (meta, image []byte, err error)
}

func newFakeBases() *fakeBases {
	return &fakeBases{puts: map[string]int{}, putStarted: make(chan string, 16)}
}

func (b *fakeBases) PutBase(ctx context.Context, id string, meta, image []byte) error {
	b.mu.Lock()
	b.puts[id]++
	gate, fail := b.putGate, b.putFails > 0
	b.putFails--
	b.mu.Unlock()
	b.putStarted <- id
	if fail {
		return errors.New("blob: put: 503 Slow Down")
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (b *fakeBases) GetBase(ctx context.Context, id string) ([]byte, []byte, error) {
	if b.getBase == nil {
		return nil, nil, checkpoint.ErrNone
	}
	return b.getBase(ctx, id)
}

func (b *fakeBases) putCounts() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]int{}
	for id, n := range b.puts {
		out[id] = n
	}
	return out
}

// startWithBases starts a pool on the shared snapshot with b as its Bases.
func startWithBases(t *testing.T, b wasm.Bases, opts ...func(*wasm.Config)) *pool.Pool {
	t.Helper()
	cfg := sandboxtest.Config(t)
	cfg.Bases = b
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := wasm.New(ctx, cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// retarget rewrites a session state's header to name another snapshot:
// a state taken over a snapshot this server never had.
func retarget(t *testing.T, state []byte, snapshot string) []byte {
	t.Helper()
	zr, err := zstd.NewReader(bytes.NewReader(state))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	plain, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.BigEndian.Uint32(plain)
	var header map[string]any
	if err := json.Unmarshal(plain[4:4+n], &header); err != nil {
		t.Fatal(err)
	}
	if _, ok := header["snapshot"]; !ok {
		t.Fatalf("the state's header has no snapshot: %v", header)
	}
	header["snapshot"] = snapshot
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	zw, _ := zstd.NewWriter(&out)
	_ = binary.Write(zw, binary.BigEndian, uint32(len(h)))
	_, _ = zw.Write(h)
	_, _ = zw.Write(plain[4+n:])
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// TestRestoreTransientFailures (issue 37, row 4): a restore that fails
// for a reason a later try may not meet is not ErrNoCheckpoint — the
// caller would drop the checkpoint on it — while a state that is bad for
// good is: its context cancelled or its deadline passed, or its base's
// fetch failing in the store, against a base Bases does not have, fails
// its check or does not match.
func TestRestoreTransientFailures(t *testing.T) {
	bases := newFakeBases()
	p := startWithBases(t, bases)
	s, err := p.Open(context.Background(), sandbox.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	runOK(t, s, "x = 41")
	state, err := takeCheckpoint(t, s)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("context cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := p.Open(ctx, sandbox.SessionOptions{Restore: state})
		if err == nil || errors.Is(err, sandbox.ErrNoCheckpoint) || !errors.Is(err, context.Canceled) {
			t.Fatalf("a restore whose context was cancelled: %v, want context.Canceled and not ErrNoCheckpoint", err)
		}
	})
	t.Run("deadline passed", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
		defer cancel()
		<-ctx.Done()
		_, err := p.Open(ctx, sandbox.SessionOptions{Restore: state})
		if err == nil || errors.Is(err, sandbox.ErrNoCheckpoint) {
			t.Fatalf("a restore past its deadline: %v, want an error that is not ErrNoCheckpoint", err)
		}
	})
	// The state still restores: nothing above harmed it.
	r, err := p.Open(context.Background(), sandbox.SessionOptions{Restore: state})
	if err != nil {
		t.Fatalf("the state after failed restores: %v", err)
	}
	if got := runOK(t, r, "print(x + 1)"); got != "42" {
		t.Fatalf("restored %q", got)
	}
	r.Close()

	elsewhere := retarget(t, state, "0000000000000000000000000000000000000000000000000000000000000000@2000-01-01T00:00:00Z")
	storeDown := errors.New("dial tcp 10.0.0.7:9000: connect: connection refused")
	for _, tc := range []struct {
		name    string
		getBase func(ctx context.Context, id string) ([]byte, []byte, error)
		refused bool
	}{
		{"the store unreachable", func(context.Context, string) ([]byte, []byte, error) {
			return nil, nil, fmt.Errorf("blob: get: %w", storeDown)
		}, false},
		{"the store timing out", func(context.Context, string) ([]byte, []byte, error) {
			return nil, nil, fmt.Errorf("blob: get: %w", context.DeadlineExceeded)
		}, false},
		{"the base is not there", func(context.Context, string) ([]byte, []byte, error) {
			return nil, nil, checkpoint.ErrNone
		}, true},
		{"the base fails its check", func(context.Context, string) ([]byte, []byte, error) {
			return nil, nil, fmt.Errorf("checkpoint: base: %w", checkpoint.ErrRefused)
		}, true},
		{"another implementation's refusal", func(context.Context, string) ([]byte, []byte, error) {
			return nil, nil, fmt.Errorf("%w: no such base", sandbox.ErrNoCheckpoint)
		}, true},
		{"the base does not match its id", func(context.Context, string) ([]byte, []byte, error) {
			return []byte(`{"module":"x","pages":1}`), make([]byte, 64<<10), nil
		}, true},
		{"the base's metadata is not JSON", func(context.Context, string) ([]byte, []byte, error) {
			return []byte("{"), nil, nil
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bases.mu.Lock()
			bases.getBase = tc.getBase
			bases.mu.Unlock()
			_, err := p.Open(context.Background(), sandbox.SessionOptions{Restore: elsewhere})
			if err == nil {
				t.Fatal("a state over a snapshot never fetched restored")
			}
			if got := errors.Is(err, sandbox.ErrNoCheckpoint); got != tc.refused {
				t.Fatalf("Open: %v: ErrNoCheckpoint is %v, want %v", err, got, tc.refused)
			}
			if !tc.refused && !strings.Contains(err.Error(), "blob: get") {
				t.Fatalf("Open: %v, want the store's error", err)
			}
		})
	}
}
