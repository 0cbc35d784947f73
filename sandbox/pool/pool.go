package pool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/sandbox"
	"github.com/codeinterp/codeinterp/sandbox/cgroup"
)

// Pool implements sandbox.Provider.
type Pool struct {
	cfg     Config
	log     *zap.Logger
	cg      cgroup.Driver // nil when isolation is off
	root    bool
	spawner *spawner

	slots chan struct{} // one token per open session
	warm  chan *proc    // started interpreters with the default memory size
	// spares holds one token per warm interpreter missing: a refiller takes
	// one before it starts an interpreter, Open returns one when it takes an
	// interpreter from warm. So warm never holds more than WarmWorkers and
	// a send to it never blocks.
	spares chan struct{}

	mu      sync.Mutex
	live    map[*proc]struct{} // every worker not yet reaped, for Close
	lastErr error              // the last start-up failure, for Ready

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
	seq    atomic.Uint64
}

var _ sandbox.Provider = (*Pool)(nil)

// ErrRuntimeMissing is matched by New's error when the CPython-WASI runtime
// has not been built.
var ErrRuntimeMissing = errors.New("pool: CPython-WASI runtime not found")

// New checks the runtime and isolation, fills the compilation cache, and
// starts the warm workers in the background. It fails closed: without
// working cgroups it returns an error unless cfg.Isolation.Cgroup is "off".
func New(ctx context.Context, cfg Config, log *zap.Logger) (*Pool, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("pool: invalid config: %w", err)
	}
	for _, f := range []string{"python.wasm", "lib/python3.13/os.py"} {
		if _, err := os.Stat(filepath.Join(cfg.RuntimeDir, f)); err != nil {
			return nil, fmt.Errorf("%w at %s (%v): build it with `make runtime` (runtime/build-python-wasi.sh)",
				ErrRuntimeMissing, cfg.RuntimeDir, err)
		}
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = filepath.Join(cfg.RuntimeDir, "wazero-cache")
	}
	p := &Pool{
		cfg:    cfg,
		log:    log,
		root:   os.Geteuid() == 0,
		slots:  make(chan struct{}, cfg.MaxSessions),
		warm:   make(chan *proc, cfg.WarmWorkers),
		spares: make(chan struct{}, cfg.WarmWorkers),
		live:   map[*proc]struct{}{},
	}
	if cfg.Isolation.Cgroup == "off" {
		log.Warn("sandbox isolation is OFF: workers run without cgroup limits (memory, pids, CPU). Never do this in production.")
	} else {
		d, err := cgroup.Open(cfg.Isolation.Cgroup, cfg.Isolation.CgroupParent)
		if err != nil {
			return nil, fmt.Errorf("pool: cgroups unavailable (set isolation.cgroup: off only on a laptop): %w", err)
		}
		p.cg = d
		log.Info("sandbox cgroups", zap.String("version", d.Version()), zap.String("parent", cfg.Isolation.CgroupParent))
	}
	if !p.root {
		log.Warn("server is not root: workers keep the server's uid and no namespaces are made")
	}
	// The trusted step that writes native code to the cache runs before any
	// worker, so workers only read it.
	pre := exec.CommandContext(ctx, cfg.WorkerCommand[0], append(append([]string(nil), cfg.WorkerCommand[1:]...),
		"precompile", cfg.RuntimeDir, cfg.CacheDir)...)
	pre.Env = []string{}
	if out, err := pre.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pool: precompile python.wasm: %w: %s", err, out)
	}
	p.spawner = newSpawner()
	p.ctx, p.cancel = context.WithCancel(context.Background())
	for range cfg.WarmWorkers {
		p.spares <- struct{}{}
	}
	// Refills run side by side, as many as there are cores to start
	// interpreters on: a burst that empties the warm pool is made good in
	// parallel on a big machine.
	for range min(cfg.WarmWorkers, runtime.NumCPU()) {
		p.wg.Add(1)
		go p.refiller()
	}
	return p, nil
}

// Ready reports whether the pool can start interpreters.
func (p *Pool) Ready(ctx context.Context) error {
	if p.closed.Load() {
		return sandbox.ErrClosed
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastErr
}

// Capacity reports the pool's occupancy.
func (p *Pool) Capacity() sandbox.Capacity {
	return sandbox.Capacity{InUse: len(p.slots), Max: cap(p.slots), Warm: len(p.warm)}
}

// Open starts a session, taking a warm interpreter when one fits.
func (p *Pool) Open(ctx context.Context, opts sandbox.SessionOptions) (sandbox.Session, error) {
	if p.closed.Load() {
		return nil, sandbox.ErrClosed
	}
	mem := opts.MemoryBytes
	if mem == 0 {
		mem = p.cfg.Limits.GuestMemoryBytes
	}
	if mem > p.cfg.Limits.MaxGuestMemoryBytes || mem < 32<<20 {
		return nil, &sandbox.LimitError{Limit: "memory", Value: mem, Max: p.cfg.Limits.MaxGuestMemoryBytes}
	}
	if err := p.acquire(ctx); err != nil {
		return nil, err
	}
	s := &session{pool: p, id: p.newID(), guestMem: mem}
	if mem == p.cfg.Limits.GuestMemoryBytes {
		select {
		case w := <-p.warm:
			w.foreground()
			s.proc = w
			p.spares <- struct{}{}
		default:
		}
	}
	if s.proc == nil {
		w, err := p.spawn(ctx, spawnOpts{id: s.id, guestMem: mem})
		if err != nil {
			<-p.slots
			return nil, err
		}
		s.proc = w
	}
	return s, nil
}

// acquire takes a session slot, waiting at most the queue wait.
func (p *Pool) acquire(ctx context.Context) error {
	select {
	case p.slots <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(p.cfg.QueueWait)
	defer t.Stop()
	select {
	case p.slots <- struct{}{}:
		return nil
	case <-t.C:
		return fmt.Errorf("%w: %d sessions open, none freed within %s", sandbox.ErrCapacity, cap(p.slots), p.cfg.QueueWait)
	case <-ctx.Done():
		return fmt.Errorf("pool: waiting for capacity: %w", ctx.Err())
	case <-p.ctx.Done():
		return sandbox.ErrClosed
	}
}

// Close kills every worker and waits for them.
func (p *Pool) Close() error {
	p.mu.Lock()
	already := p.closed.Swap(true)
	p.mu.Unlock()
	if already {
		return nil
	}
	p.cancel()
	p.wg.Wait()
	p.mu.Lock()
	live := make([]*proc, 0, len(p.live))
	for w := range p.live {
		live = append(live, w)
	}
	p.mu.Unlock()
	for _, w := range live {
		w.kill()
		p.release(w)
	}
	p.spawner.stop()
	return nil
}

func (p *Pool) newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%d-%s", p.seq.Add(1), hex.EncodeToString(b[:]))
}

// refiller keeps starting interpreters for the warm pool while spares are
// missing.
func (p *Pool) refiller() {
	defer p.wg.Done()
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.spares:
		}
		w, err := p.spawn(p.ctx, spawnOpts{id: p.newID(), guestMem: p.cfg.Limits.GuestMemoryBytes, background: true})
		p.mu.Lock()
		p.lastErr = err
		p.mu.Unlock()
		if err != nil {
			p.spares <- struct{}{} // still missing
			if p.ctx.Err() != nil {
				return
			}
			p.log.Error("starting a warm interpreter failed", zap.Error(err))
			select {
			case <-time.After(backoff):
			case <-p.ctx.Done():
				return
			}
			backoff = min(2*backoff, 10*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		p.warm <- w
	}
}

func (p *Pool) track(w *proc) {
	p.mu.Lock()
	p.live[w] = struct{}{}
	p.mu.Unlock()
}

// release forgets a reaped worker and removes its cgroup.
// It is idempotent: Pool.Close and a late Session.Close may both call it.
func (p *Pool) release(w *proc) {
	<-w.exited
	w.releaseOnce.Do(func() {
		p.mu.Lock()
		delete(p.live, w)
		p.mu.Unlock()
		if w.group != nil {
			if err := w.group.Delete(); err != nil {
				p.log.Warn("removing a worker cgroup failed", zap.String("cgroup", w.group.Path()), zap.Error(err))
			}
		}
	})
}

// WorkerPIDs lists the process ids of the workers not yet reaped, warm ones
// included. It is for diagnostics and tests.
func (p *Pool) WorkerPIDs() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	pids := make([]int, 0, len(p.live))
	for w := range p.live {
		pids = append(pids, w.cmd.Process.Pid)
	}
	return pids
}
