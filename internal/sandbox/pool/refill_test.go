package pool

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/internal/wire"
)

// recordingKind is a Kind whose interpreters do nothing but record when
// they were started and run: it tests the pool's scheduling of refills,
// which no real interpreter can make observable without timing.
type recordingKind struct {
	mu     sync.Mutex
	starts []time.Time
	runs   []time.Time
	// started receives once per Start.
	started chan struct{}
}

func (k *recordingKind) Name() string                     { return "recording" }
func (k *recordingKind) Prepare(context.Context) error    { return nil }
func (k *recordingKind) MaxMemoryBytes() int64            { return 1 << 30 }
func (k *recordingKind) Environment() sandbox.Environment { return sandbox.Environment{} }
func (k *recordingKind) Close() error                     { return nil }
func (k *recordingKind) Start(ctx context.Context, o StartOptions) (Interpreter, error) {
	k.mu.Lock()
	k.starts = append(k.starts, time.Now())
	k.mu.Unlock()
	k.started <- struct{}{}
	return &recordingInterp{k: k, exited: make(chan struct{})}, nil
}

type recordingInterp struct {
	k      *recordingKind
	once   sync.Once
	exited chan struct{}
}

func (i *recordingInterp) PID() int                { return 0 }
func (i *recordingInterp) Foreground()             {}
func (i *recordingInterp) Exited() <-chan struct{} { return i.exited }
func (i *recordingInterp) Diagnostics() string     { return "" }
func (i *recordingInterp) Kill()                   { i.once.Do(func() { close(i.exited) }) }
func (i *recordingInterp) File(context.Context, string, *wire.FileRequest) (*wire.FileResult, error) {
	return nil, errors.New("no files here")
}
func (i *recordingInterp) Run(_ context.Context, id uint64, _ []byte, _ time.Duration) (*wire.Result, error) {
	i.k.mu.Lock()
	i.k.runs = append(i.k.runs, time.Now())
	i.k.mu.Unlock()
	return &wire.Result{ID: id, Status: wire.StatusOK}, nil
}

func (k *recordingKind) waitStart(t *testing.T, what string) time.Time {
	t.Helper()
	select {
	case <-k.started:
	case <-time.After(30 * time.Second):
		t.Fatalf("no interpreter was started %s", what)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.starts[len(k.starts)-1]
}

// settle is how long the session waits before its first step, so that a
// refill started at Open would have begun by then (it bounds nothing).
const settle = 50 * time.Millisecond

// TestRefillAfterWarmOpen: a session that takes the warm interpreter has
// it replaced only once its first run has ended, it closed, or refillDelay
// passed — never beside its first call.
func TestRefillAfterWarmOpen(t *testing.T) {
	for _, tc := range []struct {
		name string
		// then is what the session does after Open; it returns the time
		// before which the refill must not have started.
		then func(t *testing.T, s sandbox.Session, opened time.Time) time.Time
	}{
		{"first run", func(t *testing.T, s sandbox.Session, _ time.Time) time.Time {
			time.Sleep(settle)
			if _, err := s.Run(context.Background(), "print(25)"); err != nil {
				t.Fatal(err)
			}
			return time.Time{} // checked against the run below
		}},
		{"close", func(t *testing.T, s sandbox.Session, _ time.Time) time.Time {
			time.Sleep(settle)
			closed := time.Now()
			s.Close()
			return closed
		}},
		{"idle", func(t *testing.T, s sandbox.Session, opened time.Time) time.Time {
			return opened.Add(refillDelay)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &recordingKind{started: make(chan struct{}, 8)}
			cfg := DefaultConfig()
			cfg.WarmWorkers, cfg.MaxSessions = 1, 2
			cfg.Isolation.Cgroup = "off"
			p, err := New(context.Background(), cfg, k, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			k.waitStart(t, "for the warm pool")
			for p.Capacity().Warm == 0 {
				time.Sleep(time.Millisecond)
			}
			opened := time.Now()
			s, err := p.Open(context.Background(), sandbox.SessionOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			notBefore := tc.then(t, s, opened)
			refill := k.waitStart(t, "to refill the warm pool")
			k.mu.Lock()
			runs := append([]time.Time(nil), k.runs...)
			k.mu.Unlock()
			if len(runs) > 0 {
				// The run began before the refill, unless refillDelay had
				// passed by then (a slow machine): never the other way.
				if refill.Before(runs[0]) && refill.Sub(opened) < refillDelay {
					t.Errorf("the refill started %s after Open, before the session's first run", refill.Sub(opened))
				}
			}
			if refill.Before(notBefore) {
				t.Errorf("the refill started %s before it should have", notBefore.Sub(refill))
			}
		})
	}
}
