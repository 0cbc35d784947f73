package containers_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/checkpoint"
	"github.com/codeinterp/codeinterp/internal/containers"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
)

// gatedSaves holds the writes of one container's checkpoints until gate
// is closed: a checkpoint store that is slow for as long as the test says.
type gatedSaves struct {
	*checkpoint.Keeper
	mu      sync.Mutex
	target  string
	gate    chan struct{}
	entered chan struct{} // closed when the target's first Save is held
	once    sync.Once
}

func (g *gatedSaves) Save(ctx context.Context, owner, cid string, fence uint64, state []byte) (string, error) {
	g.mu.Lock()
	held := cid == g.target
	g.mu.Unlock()
	if held {
		g.once.Do(func() { close(g.entered) })
		select {
		case <-g.gate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return g.Keeper.Save(ctx, owner, cid, fence, state)
}

// guard fails t when done is not closed within a generous bound: not a
// measurement, only that the test ends with a message instead of hanging
// if a request waits for what it must not.
func guard(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s: still waiting after 2 minutes", what)
	}
}

// TestHeadroomKeepsCheckpointsOffTheRequestPath (issue 41): with 8
// sessions and checkpoints on, once fewer than 2 slots are free the least
// recently used idle interpreter is checkpointed and closed in the
// background. Its checkpoint write is held (a slow store): the request
// that started it and the next new container both run and finish
// meanwhile; the trimmed container's own next request waits for that
// checkpoint — never an older one, never a second interpreter — and gets
// its variables back.
func TestHeadroomKeepsCheckpointsOffTheRequestPath(t *testing.T) {
	f := newFixture(t)
	g := &gatedSaves{Keeper: keeper(t, t.TempDir(), newKey(t)), gate: make(chan struct{}), entered: make(chan struct{})}
	defer func() {
		select {
		case <-g.gate:
		default:
			close(g.gate)
		}
	}()
	m := managerWith(t, f, g, 0, func(c *pool.Config) { c.MaxSessions, c.WarmWorkers, c.QueueWait = 8, 0, 30*time.Second })
	ctx := context.Background()
	newRound := func(code string) string {
		c, err := m.Open(ctx, containers.Spec{Owner: "o"})
		if err != nil {
			t.Error(err)
			return ""
		}
		defer c.Close()
		if _, err := c.Run(ctx, code); err != nil {
			t.Error(err)
		}
		return c.ID()
	}
	a := newRound("x = 41")
	g.mu.Lock()
	g.target = a
	g.mu.Unlock()
	for range 5 { // 6 idle interpreters: 2 slots free, no trim
		newRound("print(1)")
	}
	// The seventh leaves one slot free: the trim of a (the least recently
	// used) starts, and its checkpoint write is held.
	done := make(chan struct{})
	go func() { defer close(done); newRound("print(7)") }()
	guard(t, done, "the request that started the trim")
	guard(t, g.entered, "the trim's checkpoint write")
	done = make(chan struct{})
	go func() { defer close(done); newRound("print(8)") }()
	guard(t, done, "a new container while another container's checkpoint is being written")

	type answer struct {
		out   string
		reset bool
		err   error
	}
	got := make(chan answer, 1)
	go func() {
		c, err := m.Open(ctx, containers.Spec{Owner: "o", ID: a})
		if err != nil {
			got <- answer{err: err}
			return
		}
		defer c.Close()
		r, err := c.Run(ctx, "print(x + 1)")
		got <- answer{strings.TrimSpace(r.Stdout), r.Reset, err}
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case r := <-got:
		t.Fatalf("the trimmed container ran before its checkpoint was written: %+v", r)
	default:
	}
	close(g.gate)
	select {
	case r := <-got:
		if r.err != nil || r.out != "42" || r.reset {
			t.Fatalf("the trimmed container after its checkpoint: %+v, want 42 restored and no reset", r)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the trimmed container's request still waits after its checkpoint was written")
	}
}
