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
	// Secret authenticates forwarded runs: every replica has the same
	// (a Secret, or one kept in the shared store on one host).
	Secret string
	// Leases is the shared lease table.
	Leases Leases
	// TTL is a lease's life without renewal (default 10s): how long a
	// container of a killed holder waits at most before another replica
	// takes it without having found the holder gone. Leases are renewed
	// every TTL/3.
	TTL time.Duration
	// Handler runs a forwarded run of key here, under this Node's lease
	// with token. Its answer is returned to the forwarding replica.
	Handler func(ctx context.Context, key string, token uint64, payload []byte) ([]byte, error)
	// OnLost is called (from the renewal loop) with a key whose lease
	// another replica took: the interpreter held for it must not run
	// again here.
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

	mu       sync.Mutex
	held     map[string]uint64 // key → token of the leases held
	conns    map[string]*grpc.ClientConn
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
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	return &Node{cfg: cfg, id: id, self: Lease{Holder: id, Addr: cfg.Addr},
		held: map[string]uint64{}, conns: map[string]*grpc.ClientConn{}}, nil
}

// ID is this process's holder ID.
func (n *Node) ID() string { return n.id }

// Addr is the address other replicas forward to.
func (n *Node) Addr() string { return n.cfg.Addr }

// Claim makes this Node the key's holder unless another holds it, and
// returns the lease in force; mine says whose it is. Called before every
// run: a holder whose lease was taken learns it here, before it runs.
func (n *Node) Claim(ctx context.Context, key string) (l Lease, mine bool, err error) {
	return n.take(ctx, key, 0)
}

// Steal takes the key's lease from gone, a holder found gone (Forward's
// ErrGone), unless the lease changed since: then the lease in force is
// returned, as Claim does.
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
	l, err := n.cfg.Leases.Take(ctx, key, n.self, prev, n.cfg.TTL)
	if err != nil {
		return Lease{}, false, err
	}
	mine := l.Holder == n.id
	n.mu.Lock()
	if mine {
		n.held[key] = l.Token
	} else {
		delete(n.held, key)
	}
	n.mu.Unlock()
	return l, mine, nil
}

// Holds reports whether this Node holds key with token, as the store says
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
	token, ok := n.held[key]
	delete(n.held, key)
	n.mu.Unlock()
	if !ok {
		return
	}
	if err := n.cfg.Leases.Release(ctx, key, n.id, token); err != nil {
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
// is taken again (same token). A lease another replica took meanwhile is
// lost (Config.OnLost); one the store forgot (Redis restarted) is taken
// again with a new token.
func (n *Node) Renew(ctx context.Context) {
	t := time.NewTicker(n.cfg.TTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.renewOnce(ctx)
	}
}

func (n *Node) renewOnce(ctx context.Context) {
	n.mu.Lock()
	keys := make(map[string]uint64, len(n.held))
	for k, t := range n.held {
		keys[k] = t
	}
	n.mu.Unlock()
	for key, token := range keys {
		rctx, cancel := context.WithTimeout(ctx, n.cfg.TTL/3)
		l, ok, err := n.cfg.Leases.Renew(rctx, key, n.id, token, n.cfg.TTL)
		if err == nil && !ok && n.stillHolds(key, token) {
			// The store forgot it (Redis restarted without its data): no
			// one else holds it, so it is taken again.
			l, _, err = n.take(rctx, key, 0)
			ok = true
		}
		cancel()
		if err != nil {
			n.cfg.Log.Warn("renewing a lease failed", zap.String("key", key), zap.Error(err))
			continue
		}
		if ok && l.Holder == n.id {
			continue
		}
		n.mu.Lock()
		lost := n.held[key] == token
		if lost {
			delete(n.held, key)
		}
		n.mu.Unlock()
		if lost {
			n.cfg.Log.Warn("another replica took a lease this one held; its interpreter here is dropped",
				zap.String("key", key), zap.String("holder", l.Addr))
			n.metrics.lost()
			n.cfg.OnLost(key)
		}
	}
}

func (n *Node) stillHolds(key string, token uint64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	t, ok := n.held[key]
	return ok && t == token
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
	n.mu.Unlock()
	var errs []error
	for _, c := range conns {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
