package pool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/cgroup"
)

// Pool implements sandbox.Provider over one Kind of interpreter.
type Pool struct {
	cfg  Config
	kind Kind
	log  *zap.Logger
	cg   cgroup.Driver // nil when isolation is off

	slots chan struct{} // one token per open session
	warm  chan *interp  // started interpreters with the default memory size
	// spares holds one token per warm interpreter missing: a refiller takes
	// one before it starts an interpreter, Open returns one when it takes an
	// interpreter from warm. So warm never holds more than WarmWorkers and
	// a send to it never blocks.
	spares chan struct{}

	mu   sync.Mutex
	live map[*interp]struct{} // every interpreter not yet released, for Close
	// idle holds recycled interpreters by owner, oldest first: a process
	// that served an owner's session serves only that owner's later ones.
	idle    map[string][]*interp
	idleLen int
	// recycling counts, by owner, interpreters being recycled right now;
	// idleChanged is closed (and replaced) whenever one finishes, so an
	// Open can wait for the owner's worker rather than start a process.
	recycling   map[string]int
	idleChanged chan struct{}
	lastErr     error // the last start-up failure, for Ready

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
	// waiting counts the opens queued in acquire (Capacity.Waiting).
	waiting atomic.Int32
	seq     atomic.Uint64
}

var _ sandbox.Provider = (*Pool)(nil)

// interp is the pool's record of one started interpreter.
type interp struct {
	Interpreter
	group       cgroup.Group // nil when isolation is off
	memory      int64
	network     bool // started with an egress allowlist: one session's, never recycled
	releaseOnce sync.Once
	// owner is the owner of the first session the process served ("" until
	// then); sessions counts the sessions it has served.
	owner    string
	sessions int
}

// New checks isolation, prepares the kind, and starts the warm
// interpreters in the background. It fails closed: without working cgroups
// it returns an error unless cfg.Isolation.Cgroup is "off".
func New(ctx context.Context, cfg Config, kind Kind, log *zap.Logger) (*Pool, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("pool: invalid config: %w", err)
	}
	if max := kind.MaxMemoryBytes(); cfg.Limits.MaxGuestMemoryBytes > max {
		return nil, fmt.Errorf("pool: invalid config: limits.max_guest_memory: %d is above what the %s provider can honour (%d)",
			cfg.Limits.MaxGuestMemoryBytes, kind.Name(), max)
	}
	p := &Pool{
		cfg:    cfg,
		kind:   kind,
		log:    log,
		slots:  make(chan struct{}, cfg.MaxSessions),
		warm:   make(chan *interp, cfg.WarmWorkers),
		spares: make(chan struct{}, cfg.WarmWorkers),
		live:   map[*interp]struct{}{},
		idle:   map[string][]*interp{},

		recycling:   map[string]int{},
		idleChanged: make(chan struct{}),
	}
	if cfg.Isolation.Cgroup == "off" {
		log.Warn("sandbox isolation is OFF: interpreters run without cgroup limits (memory, pids, CPU). Never do this in production.")
	} else {
		d, err := cgroup.Open(cfg.Isolation.Cgroup, cfg.Isolation.CgroupParent)
		if err != nil {
			return nil, fmt.Errorf("pool: cgroups unavailable (set isolation.cgroup: off only on a laptop): %w", err)
		}
		p.cg = d
		log.Info("sandbox cgroups", zap.String("version", d.Version()), zap.String("parent", cfg.Isolation.CgroupParent))
	}
	if os.Geteuid() != 0 {
		log.Warn("server is not root: interpreters keep the server's uid and no namespaces are made")
	}
	if err := kind.Prepare(ctx); err != nil {
		return nil, fmt.Errorf("pool: %s provider: %w", kind.Name(), err)
	}
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

// Kind returns the kind of interpreter the pool runs.
func (p *Pool) Kind() Kind { return p.kind }

// Environment describes the pool's interpreters.
func (p *Pool) Environment() sandbox.Environment {
	env := p.kind.Environment()
	env.Network = env.Network && p.cfg.Egress != nil && p.cfg.Egress.Enabled()
	return env
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
	return sandbox.Capacity{InUse: len(p.slots), Max: cap(p.slots), Warm: len(p.warm), Waiting: int(p.waiting.Load())}
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
	if mem > p.cfg.Limits.MaxGuestMemoryBytes || mem < MinMemoryBytes {
		return nil, &sandbox.LimitError{Limit: "memory", Value: mem, Max: p.cfg.Limits.MaxGuestMemoryBytes}
	}
	if opts.Network != nil && !p.Environment().Network {
		return nil, fmt.Errorf("%w (provider %s, sandbox.network.allowed_domains)", sandbox.ErrNoNetwork, p.kind.Name())
	}
	if err := p.acquire(ctx); err != nil {
		return nil, err
	}
	s := &session{pool: p, id: p.newID(), memory: mem, owner: opts.Owner}
	if opts.Network != nil {
		es, err := p.cfg.Egress.Open(ctx, *opts.Network)
		if err != nil {
			<-p.slots
			return nil, fmt.Errorf("pool: egress: %w", err)
		}
		s.egress = es
	}
	// A warm or parked interpreter has no network and no state: a session
	// with an allowlist, or restored from a checkpoint, gets one started
	// for it.
	if mem == p.cfg.Limits.GuestMemoryBytes && opts.Network == nil && opts.Restore == nil {
		s.it = p.takeIdle(ctx, opts.Owner)
		if s.it == nil {
			select {
			case w := <-p.warm:
				w.Foreground()
				p.foregroundWeight(w)
				s.it = w
				s.deferRefill()
			default:
			}
		}
	}
	if s.it == nil {
		if opts.Restore != nil {
			if r, ok := p.kind.(SessionRestorer); !ok || !r.RestoresSessions() {
				s.closeEgress()
				<-p.slots
				return nil, fmt.Errorf("%w: the %s provider cannot restore a session", sandbox.ErrNoCheckpoint, p.kind.Name())
			}
		}
		w, err := p.start(ctx, s.id, mem, false, s.egress, opts.Restore)
		if err != nil {
			s.closeEgress()
			<-p.slots
			if opts.Restore != nil {
				return nil, restoreError(ctx, err)
			}
			return nil, err
		}
		s.it = w
	}
	s.it.owner = opts.Owner
	s.it.sessions++
	s.gen.Store(1)
	return s, nil
}

// foregroundWeight gives a warm interpreter handed to a session the
// normal CPU weight back (RefillWeigher). Should the write fail, the
// session runs at the refill's weight: slower under contention, never
// less confined.
func (p *Pool) foregroundWeight(w *interp) {
	if r, ok := p.kind.(RefillWeigher); !ok || r.RefillCPUWeight() == cgroup.DefaultCPUWeight || w.group == nil {
		return
	}
	if err := w.group.SetCPUWeight(cgroup.DefaultCPUWeight); err != nil {
		p.log.Warn("a warm interpreter's CPU weight could not be restored", zap.Error(err))
	}
}

// restoreError is what Open reports when an interpreter restoring a
// state did not start. Only the kind's definite refusal of the state (an
// error wrapping sandbox.ErrNoCheckpoint: corrupt, not of this runtime,
// its base gone for good) says there is no checkpoint, which its caller
// may then drop; anything else — the context ended, a start timeout, a
// worker or runsc that failed, a store that could not be read — is
// returned as it is, and the state is kept for a later try. A refusal
// made while ctx was ending is not trusted to be definite either (the
// context's end may be what made the state look unusable).
func restoreError(ctx context.Context, err error) error {
	if errors.Is(err, sandbox.ErrNoCheckpoint) && ctx.Err() != nil {
		return fmt.Errorf("pool: restore: %v (%w)", err, context.Cause(ctx))
	}
	return err
}

// takeIdle returns a recycled interpreter of owner's, or nil. When none
// is idle but one of the owner's is being recycled (its last session just
// closed: a few milliseconds), it waits for that one up to recycleWait,
// which is far less than starting a worker. An owner of "" (no credential)
// is nobody in particular: its sessions never share.
func (p *Pool) takeIdle(ctx context.Context, owner string) *interp {
	if owner == "" || p.cfg.SessionsPerWorker <= 1 {
		return nil
	}
	deadline := time.NewTimer(recycleWait)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		w := p.takeIdleLocked(owner)
		pending, changed := p.recycling[owner] > 0, p.idleChanged
		p.mu.Unlock()
		if w != nil || !pending {
			return w
		}
		select {
		case <-changed:
		case <-deadline.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// recycleWait bounds how long Open waits for an owner's worker being
// recycled.
const recycleWait = 250 * time.Millisecond

// takeIdleLocked pops the owner's most recently parked live interpreter.
// Callers hold p.mu.
func (p *Pool) takeIdleLocked(owner string) *interp {
	for q := p.idle[owner]; len(q) > 0; q = p.idle[owner] {
		w := q[len(q)-1] // the most recently used: its pages are warm
		p.setIdle(owner, q[:len(q)-1])
		select {
		case <-w.Exited():
			go p.release(w)
			continue
		default:
		}
		return w
	}
	return nil
}

func (p *Pool) setIdle(owner string, q []*interp) {
	p.idleLen += len(q) - len(p.idle[owner])
	if len(q) == 0 {
		delete(p.idle, owner)
	} else {
		p.idle[owner] = q
	}
}

// recycleOrRelease is what happens to a session's interpreter when the
// session closes: with sessions_per_worker > 1 a healthy one that may
// serve more sessions of its owner starts a fresh interpreter in place and
// waits for that owner; anything else is released.
func (p *Pool) recycleOrRelease(w *interp) {
	r, ok := w.Interpreter.(Recycler)
	if !ok || w.network || w.owner == "" || w.sessions >= p.cfg.SessionsPerWorker ||
		w.memory != p.cfg.Limits.GuestMemoryBytes || p.closed.Load() {
		p.release(w)
		return
	}
	select {
	case <-w.Exited():
		p.release(w)
		return
	default:
	}
	p.mu.Lock()
	p.recycling[w.owner]++
	p.mu.Unlock()
	// done ends the recycling under p.mu and wakes Opens waiting for it.
	done := func() {
		if p.recycling[w.owner]--; p.recycling[w.owner] == 0 {
			delete(p.recycling, w.owner)
		}
		close(p.idleChanged)
		p.idleChanged = make(chan struct{})
	}
	ctx, cancel := context.WithTimeout(p.ctx, startTimeout)
	err := r.Recycle(ctx)
	cancel()
	if err != nil {
		p.log.Warn("recycling an interpreter failed", zap.String("provider", p.kind.Name()), zap.Error(err))
		p.mu.Lock()
		done()
		p.mu.Unlock()
		p.release(w)
		return
	}
	p.mu.Lock()
	done()
	if p.closed.Load() {
		p.mu.Unlock()
		p.release(w)
		return
	}
	var evict *interp
	if p.idleLen >= p.cfg.MaxSessions {
		// Bound the parked processes: the owner with the oldest parked
		// one gives it up (map order is random; good enough for a bound).
		for o, q := range p.idle {
			evict = q[0]
			p.setIdle(o, q[1:])
			break
		}
	}
	p.setIdle(w.owner, append(p.idle[w.owner], w))
	p.mu.Unlock()
	if evict != nil {
		p.release(evict)
	}
}

// startTimeout bounds one Recycle.
const startTimeout = time.Minute

// MinMemoryBytes is the smallest session memory any kind accepts.
const MinMemoryBytes = 32 << 20

// acquire takes a session slot, waiting at most the queue wait.
func (p *Pool) acquire(ctx context.Context) error {
	select {
	case p.slots <- struct{}{}:
		return nil
	default:
	}
	p.waiting.Add(1)
	defer p.waiting.Add(-1)
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

// start makes the interpreter's cgroup and has the kind start it inside.
func (p *Pool) start(ctx context.Context, id string, mem int64, background bool, es *egress.Session, restore []byte) (*interp, error) {
	var group cgroup.Group
	if p.cg != nil {
		g, err := p.cg.New(p.kind.Name()+"-"+id, cgroup.Limits{
			MemoryBytes: mem + p.cfg.Limits.WorkerOverheadBytes,
			Pids:        p.cfg.Limits.Pids,
			CPUs:        p.cfg.Limits.CPUs + p.cfg.Limits.WorkerOverheadCPUs,
		})
		if err != nil {
			return nil, fmt.Errorf("pool: %w", err)
		}
		group = g
		if r, ok := p.kind.(RefillWeigher); ok && background && r.RefillCPUWeight() != cgroup.DefaultCPUWeight {
			if err := g.SetCPUWeight(r.RefillCPUWeight()); err != nil {
				p.log.Warn("a refill's CPU weight could not be lowered", zap.Error(err))
			}
		}
	}
	confine := func(pid int) error {
		if group == nil {
			return nil
		}
		if err := group.Add(pid); err != nil {
			return fmt.Errorf("pool: %w", err)
		}
		// Fail closed: no guest code runs unless the kernel confirms it.
		if err := group.Verify(pid); err != nil {
			return fmt.Errorf("pool: %w", err)
		}
		return nil
	}
	it, err := p.kind.Start(ctx, StartOptions{
		ID: id, MemoryBytes: mem, Limits: p.cfg.Limits, Background: background,
		Confine: confine, Group: group, Egress: es, Restore: restore,
	})
	if err != nil {
		p.deleteGroup(group)
		return nil, err
	}
	w := &interp{Interpreter: it, group: group, memory: mem, network: es != nil}
	p.mu.Lock()
	if p.closed.Load() {
		p.mu.Unlock()
		w.Kill()
		p.deleteGroup(group)
		return nil, sandbox.ErrClosed
	}
	p.live[w] = struct{}{}
	p.mu.Unlock()
	return w, nil
}

// Close kills every interpreter and waits for them.
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
	live := make([]*interp, 0, len(p.live))
	for w := range p.live {
		live = append(live, w)
	}
	p.mu.Unlock()
	for _, w := range live {
		p.release(w)
	}
	return p.kind.Close()
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
		w, err := p.start(p.ctx, p.newID(), p.cfg.Limits.GuestMemoryBytes, true, nil, nil)
		p.mu.Lock()
		p.lastErr = err
		p.mu.Unlock()
		if err != nil {
			p.spares <- struct{}{} // still missing
			if p.ctx.Err() != nil {
				return
			}
			p.log.Error("starting a warm interpreter failed", zap.String("provider", p.kind.Name()), zap.Error(err))
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

// release kills and reaps an interpreter, forgets it and removes its
// cgroup. It is idempotent: Pool.Close and a late Session.Close may both
// call it.
func (p *Pool) release(w *interp) {
	w.Kill()
	w.releaseOnce.Do(func() {
		p.mu.Lock()
		delete(p.live, w)
		if q := p.idle[w.owner]; len(q) > 0 {
			kept := q[:0:0]
			for _, x := range q {
				if x != w {
					kept = append(kept, x)
				}
			}
			p.setIdle(w.owner, kept)
		}
		p.mu.Unlock()
		p.deleteGroup(w.group)
	})
}

func (p *Pool) deleteGroup(g cgroup.Group) {
	if g == nil {
		return
	}
	if err := g.Delete(); err != nil {
		p.log.Warn("removing an interpreter cgroup failed", zap.String("cgroup", g.Path()), zap.Error(err))
	}
}

// oomKilled reports whether the kernel's OOM killer ended a process of the
// interpreter.
func (w *interp) oomKilled() bool {
	if w.group == nil {
		return false
	}
	n, err := w.group.OOMKills()
	return err == nil && n > 0
}

// WorkerPIDs lists the outermost process ids of the interpreters not yet
// released, warm ones included. It is for diagnostics and tests.
func (p *Pool) WorkerPIDs() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	pids := make([]int, 0, len(p.live))
	for w := range p.live {
		pids = append(pids, w.PID())
	}
	return pids
}
