package pool

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/sandbox"
	"github.com/codeinterp/codeinterp/sandbox/cgroup"
	"github.com/codeinterp/codeinterp/sandbox/internal/wire"
)

// weightKind is a Kind that records, at each Start, whether the pool
// asked for a background start and the CPU weight of the cgroup it made
// for the interpreter.
type weightKind struct {
	mu     sync.Mutex
	starts []weightStart
}

type weightStart struct {
	background bool
	weight     uint64
	group      cgroup.Group
}

func (k *weightKind) Name() string                     { return "weight" }
func (k *weightKind) Prepare(context.Context) error    { return nil }
func (k *weightKind) MaxMemoryBytes() int64            { return 1 << 30 }
func (k *weightKind) Environment() sandbox.Environment { return sandbox.Environment{} }
func (k *weightKind) Close() error                     { return nil }
func (k *weightKind) Start(_ context.Context, o StartOptions) (Interpreter, error) {
	if o.Group == nil {
		return nil, errors.New("weightKind: no cgroup")
	}
	w, err := o.Group.CPUWeight()
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	k.starts = append(k.starts, weightStart{background: o.Background, weight: w, group: o.Group})
	k.mu.Unlock()
	return &weightInterp{exited: make(chan struct{})}, nil
}

func (k *weightKind) snapshot() []weightStart {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]weightStart(nil), k.starts...)
}

type weightInterp struct {
	once   sync.Once
	exited chan struct{}
}

func (i *weightInterp) PID() int                { return 0 }
func (i *weightInterp) Foreground()             {}
func (i *weightInterp) Exited() <-chan struct{} { return i.exited }
func (i *weightInterp) Diagnostics() string     { return "" }
func (i *weightInterp) Kill()                   { i.once.Do(func() { close(i.exited) }) }
func (i *weightInterp) File(context.Context, string, *wire.FileRequest) (*wire.FileResult, error) {
	return nil, errors.New("no files here")
}
func (i *weightInterp) Run(_ context.Context, id uint64, _ []byte, _ time.Duration) (*wire.Result, error) {
	return &wire.Result{ID: id, Status: wire.StatusOK}, nil
}

// TestBackgroundCPUWeight: a warm refill starts in a cgroup of the lowest
// CPU weight (a thread's nice value competes only inside its own group,
// so the group's weight is what keeps a refill off a core a run needs; on
// gVisor's systrap platform a nice value would even stay with the stub
// threads for ever), and a session that takes it gets the default weight
// back. A session started on demand never has a low weight. Real cgroups.
func TestBackgroundCPUWeight(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (real cgroups); run it as root as CI does")
	}
	cfg := DefaultConfig()
	cfg.WarmWorkers = 1
	cfg.Isolation.CgroupParent = "/codeinterp-pool-test"
	k := &weightKind{}
	p, err := New(context.Background(), cfg, k, nil)
	if err != nil {
		t.Fatalf("pool with real cgroups: %v", err)
	}
	defer p.Close()
	waitFor(t, "the warm interpreter", func() bool { return p.Capacity().Warm == 1 })
	starts := k.snapshot()
	if len(starts) != 1 || !starts[0].background || starts[0].weight != cgroup.MinCPUWeight {
		t.Fatalf("the warm start: %+v; want one background start at weight %d", starts, cgroup.MinCPUWeight)
	}
	warm := starts[0].group

	ctx := context.Background()
	s, err := p.Open(ctx, sandbox.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if w, err := warm.CPUWeight(); err != nil || w != cgroup.DefaultCPUWeight {
		t.Errorf("the warm interpreter handed to a session has weight %d (%v), want %d", w, err, cgroup.DefaultCPUWeight)
	}

	// With the warm one taken and its refill not yet made, a second
	// session may start on demand: then at the default weight.
	s2, err := p.Open(ctx, sandbox.SessionOptions{MemoryBytes: 2 * cfg.Limits.GuestMemoryBytes})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, err := s2.Run(ctx, "1"); err != nil {
		t.Fatal(err)
	}
	for _, st := range k.snapshot()[1:] {
		if st.background != (st.weight == cgroup.MinCPUWeight) {
			t.Errorf("a start with background %v had weight %d", st.background, st.weight)
		}
	}
	if n := len(k.snapshot()); n < 2 {
		t.Errorf("%d starts; the session with other memory should have started its own", n)
	}
}

// waitFor polls cond until it holds; it fails after 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
