package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Config makes a Node.
type Config struct {
	// Addr is where other replicas reach this one's forwarding service
	// (host:port): the pod's IP in a cluster, the listener's address on
	// one host.
	Addr string
	// Secret is what the cluster key is derived from: every replica has
	// the same (from the configuration, never from the shared store), at
	// least 16 bytes. It never leaves the process: the replicas prove the
	// key derived from it in the channel's TLS handshake.
	Secret string
	// Leases is the shared lease table.
	Leases Leases
	// TTL is a lease's life without renewal (default 10s): how long a
	// container of a killed holder waits at most before another replica
	// takes it without having found the holder gone. Leases are renewed
	// every TTL/3.
	TTL time.Duration
	// Handler runs a forwarded run of key here, under this Node's lease
	// with token. Its answer is returned to the forwarding replica;
	// progress, when not nil (a caller that asked for it: Forward with a
	// progress func), sends it pieces before the answer, in order.
	Handler func(ctx context.Context, key string, token uint64, payload []byte, progress func([]byte)) ([]byte, error)
	// OnLost is called (from the renewal loop) with a key whose lease
	// this Node no longer holds — another replica took it, the store
	// forgot it, or it could not be renewed for a whole TTL: the
	// interpreter held for it must not run again here, and runs in
	// flight on it are cancelled.
	OnLost func(key string)
	// DialTimeout bounds reaching a holder before a run is sent to it
	// (default 2s): one that cannot be reached in that time is gone.
	DialTimeout time.Duration
	Log         *zap.Logger
}

// Node is this replica in the cluster: the leases it holds, its
// forwarding service, and its connections to the others.
type Node struct {
	cfg  Config
	id   string
	self Lease

	key *clusterKey

	mu       sync.Mutex
	held     map[string]heldLease
	conns    map[string]*grpc.ClientConn
	peers    map[string]*peer
	draining bool
	metrics  *Metrics
}

// NewNode returns a Node with a new random ID (each process is another
// holder: a restarted server does not inherit its leases).
func NewNode(cfg Config) (*Node, error) {
	if cfg.Leases == nil || cfg.Handler == nil {
		return nil, errors.New("cluster: a node needs Leases and a Handler")
	}
	if cfg.Addr == "" {
		return nil, errors.New("cluster: a node needs the address it is reached at")
	}
	if len(cfg.Secret) < 16 {
		return nil, errors.New("cluster: the shared secret is shorter than 16 bytes")
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 10 * time.Second
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 2 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.OnLost == nil {
		cfg.OnLost = func(string) {}
	}
	key, err := deriveKey(cfg.Secret)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	return &Node{cfg: cfg, id: id, self: Lease{Holder: id, Addr: cfg.Addr}, key: key,
		held: map[string]heldLease{}, conns: map[string]*grpc.ClientConn{}, peers: map[string]*peer{}}, nil
}

// heldLease is a lease this Node holds, as far as it knows.
type heldLease struct {
	token uint64
	// until is when the lease expires at the latest unless renewed: the
	// time the last take or renewal was sent, plus TTL (this process's
	// monotonic clock; the store's expiry comes later, never sooner).
	until time.Time
}

// TTL is a lease's life without renewal.
func (n *Node) TTL() time.Duration { return n.cfg.TTL }

// ID is this process's holder ID.
func (n *Node) ID() string { return n.id }

// Addr is the address other replicas forward to.
func (n *Node) Addr() string { return n.cfg.Addr }

// Claim makes this Node the key's holder unless another holds it, and
// returns the lease in force; mine says whose it is. Called before every
// run: a holder whose lease was taken learns it here, before it runs. An
// error means the store could not be asked: nothing may run (fencing
// fails closed).
func (n *Node) Claim(ctx context.Context, key string) (l Lease, mine bool, err error) {
	return n.take(ctx, key, 0)
}

// Steal takes the key's lease from gone, a holder proven gone (Forward's
// ErrGone: another process answers at its address), unless the lease
// changed since: then the lease in force is returned, as Claim does. A
// holder that merely cannot be reached (ErrUnreachable) is not stolen
// from: its lease expires by the store's clock, and Claim takes it then.
func (n *Node) Steal(ctx context.Context, key string, gone Lease) (Lease, bool, error) {
	l, mine, err := n.take(ctx, key, gone.Token)
	if err == nil && mine {
		n.metrics.takeover()
		n.cfg.Log.Info("took over a container whose holder is gone", zap.String("key", key),
			zap.String("from", gone.Addr), zap.Uint64("token", l.Token))
	}
	return l, mine, err
}

func (n *Node) take(ctx context.Context, key string, prev uint64) (Lease, bool, error) {
	sent := time.Now()
	l, err := n.cfg.Leases.Take(ctx, key, n.self, prev, n.cfg.TTL)
	if err != nil {
		return Lease{}, false, err
	}
	mine := l.Holder == n.id
	n.mu.Lock()
	if mine {
		n.held[key] = heldLease{token: l.Token, until: sent.Add(n.cfg.TTL)}
	} else {
		delete(n.held, key)
	}
	n.mu.Unlock()
	return l, mine, nil
}

// Confirm reports whether this Node still holds key with token, as the
// store says: asked before a run's result is reported, so that a holder
// paused past its lease (which another replica may have taken and run
// since) reports its run as failed instead. An error means it cannot be
// known: the caller treats the run as not confirmed.
func (n *Node) Confirm(ctx context.Context, key string, token uint64) (bool, error) {
	return n.holds(ctx, key, token)
}

// Holder returns the key's lease as the store has it (ok false: no one
// holds it), changing nothing.
func (n *Node) Holder(ctx context.Context, key string) (Lease, bool, error) {
	return n.cfg.Leases.Get(ctx, key)
}

// holds reports whether this Node holds key with token, as the store says
// (a stale holder's own view is not enough).
func (n *Node) holds(ctx context.Context, key string, token uint64) (bool, error) {
	l, ok, err := n.cfg.Leases.Get(ctx, key)
	if err != nil || !ok {
		return false, err
	}
	return l.Holder == n.id && l.Token == token, nil
}

// Release gives up this Node's lease on key (its interpreter closed, its
// state checkpointed). A store that cannot be reached lets it expire.
func (n *Node) Release(ctx context.Context, key string) {
	n.mu.Lock()
	h, ok := n.held[key]
	delete(n.held, key)
	n.mu.Unlock()
	if !ok {
		return
	}
	if err := n.cfg.Leases.Release(ctx, key, n.id, h.token); err != nil {
		n.cfg.Log.Warn("releasing a lease failed; it expires", zap.String("key", key), zap.Error(err))
	}
}

// Held is how many leases this Node holds.
func (n *Node) Held() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.held)
}

// Renew keeps this Node's leases alive until ctx ends: every TTL/3 each
// is renewed (same token). A lease this Node no longer holds is lost
// (Config.OnLost): another replica took it, or the store has none — it
// expired while this process was paused, or the store lost its data — and
// is never taken back by a renewal (another replica may have held it
// meanwhile: the next Claim takes a new lease, with a new token, and the
// container's state comes from its checkpoint). A lease that could not be
// renewed for a whole TTL is lost too: the store may have expired it.
func (n *Node) Renew(ctx context.Context) {
	n.everyThird(ctx, func() bool { n.renewOnce(ctx); return true })
}

// everyThird calls f every TTL/3 until ctx ends or f returns false.
func (n *Node) everyThird(ctx context.Context, f func() bool) {
	t := time.NewTicker(n.cfg.TTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !f() {
			return
		}
	}
}

func (n *Node) renewOnce(ctx context.Context) {
	n.mu.Lock()
	keys := make(map[string]heldLease, len(n.held))
	for k, h := range n.held {
		keys[k] = h
	}
	n.mu.Unlock()
	for key, h := range keys {
		rctx, cancel := context.WithTimeout(ctx, n.cfg.TTL/3)
		sent := time.Now()
		l, ok, err := n.cfg.Leases.Renew(rctx, key, n.id, h.token, n.cfg.TTL)
		cancel()
		if err != nil {
			if time.Now().Before(h.until) {
				n.cfg.Log.Warn("renewing a lease failed", zap.String("key", key), zap.Error(err))
				continue
			}
			n.lose(key, h.token, "its lease could not be renewed for a whole TTL", zap.Error(err))
			continue
		}
		if ok && l.Holder == n.id && l.Token == h.token {
			n.mu.Lock()
			if cur, still := n.held[key]; still && cur.token == h.token {
				cur.until = sent.Add(n.cfg.TTL)
				n.held[key] = cur
			}
			n.mu.Unlock()
			continue
		}
		if ok {
			n.lose(key, h.token, "another replica took a lease this one held", zap.String("holder", l.Addr))
		} else {
			n.lose(key, h.token, "the lease store no longer has a lease this replica held (it expired, or the store lost its data)")
		}
	}
}

// lose forgets the lease on key held with token (if it still is) and
// tells the Config's OnLost.
func (n *Node) lose(key string, token uint64, why string, fields ...zap.Field) {
	n.mu.Lock()
	cur, held := n.held[key]
	lost := held && cur.token == token
	if lost {
		delete(n.held, key)
	}
	n.mu.Unlock()
	if !lost {
		return
	}
	n.cfg.Log.Warn(why+"; its interpreter here is dropped and its runs in flight fail",
		append([]zap.Field{zap.String("key", key), zap.Uint64("token", token)}, fields...)...)
	n.metrics.lost()
	n.cfg.OnLost(key)
}

// Drain makes the forwarding service refuse new runs (ErrDraining at the
// caller) while those under way finish: the server is stopping, and
// releases its leases once their checkpoints are written.
func (n *Node) Drain() {
	n.mu.Lock()
	n.draining = true
	n.mu.Unlock()
}

// Close closes the connections to other replicas.
func (n *Node) Close() error {
	n.mu.Lock()
	conns := n.conns
	n.conns = map[string]*grpc.ClientConn{}
	n.peers = map[string]*peer{}
	n.mu.Unlock()
	var errs []error
	for _, c := range conns {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
