package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/codeinterp/codeinterp/internal/cluster"
	"github.com/codeinterp/codeinterp/internal/cluster/redislease"
	"github.com/codeinterp/codeinterp/internal/config"
	"github.com/codeinterp/codeinterp/internal/containers"
)

// replicas is this server's part in a cluster of replicas sharing Redis
// (config.Cluster): its Node, the internal listener other replicas
// forward runs to, and the lease store.
type replicas struct {
	node   *cluster.Node
	leases *redislease.Leases
	srv    *grpc.Server
	lis    net.Listener
	renew  context.CancelFunc
	log    *zap.Logger
}

// newReplicas opens the lease store and the internal listener. mgr is
// called for the container manager when a run is forwarded here or a
// lease is lost (it is made after, with the Node as its Placement).
func newReplicas(ctx context.Context, cfg *config.Config, reg prometheus.Registerer, mgr func() *containers.Manager, log *zap.Logger) (r *replicas, err error) {
	// The cluster key first: without one there is no cluster (and Redis
	// need not be asked).
	secret, err := clusterSecret(cfg, os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	leases, err := redislease.Dial(cctx, cfg.Store.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	defer func() {
		if err != nil {
			_ = leases.Close()
		}
	}()
	lis, err := net.Listen("tcp", cfg.Cluster.Listen)
	if err != nil {
		return nil, fmt.Errorf("cluster.listen: %w", err)
	}
	defer func() {
		if err != nil {
			_ = lis.Close()
		}
	}()
	addr := cfg.Cluster.Advertise
	if addr == "" {
		addr = advertised(lis.Addr().(*net.TCPAddr))
	}
	node, err := cluster.NewNode(cluster.Config{
		Addr: addr, Secret: secret, Leases: leases, TTL: cfg.Cluster.LeaseTTL,
		Handler: func(ctx context.Context, key string, token uint64, payload []byte, progress func([]byte)) ([]byte, error) {
			return mgr().ServeForwarded(ctx, key, token, payload, progress)
		},
		OnLost: func(key string) { mgr().Fenced(key) },
		Log:    log,
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if err := node.Instrument(reg); err != nil {
		return nil, err
	}
	log.Info("cluster: containers have one holder among the replicas; runs elsewhere are forwarded to it",
		zap.String("advertise", addr), zap.String("node", node.ID()), zap.Duration("lease_ttl", cfg.Cluster.LeaseTTL))
	return &replicas{node: node, leases: leases, srv: node.NewServer(), lis: lis, log: log}, nil
}

// advertised is the address of a listener for replicas on the same host
// when none is configured: its own, loopback for an unspecified host.
func advertised(a *net.TCPAddr) string {
	ip := a.IP
	if ip == nil || ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return net.JoinHostPort(ip.String(), fmt.Sprint(a.Port))
}

// start serves forwarded runs and renews the leases (until stop).
func (r *replicas) start(errc chan<- error) {
	go func() {
		if err := r.srv.Serve(r.lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			errc <- fmt.Errorf("cluster: %w", err)
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	r.renew = cancel
	go r.node.Renew(ctx)
}

// drain refuses new forwarded runs and waits (within timeout) for those
// under way: the callers wait for this server to release its containers.
func (r *replicas) drain(timeout time.Duration) {
	r.node.Drain()
	if !stopGracefully(r.srv, timeout) {
		r.log.Warn("forwarded runs did not finish in time; stopped them")
	}
}

// close stops renewing (the containers were checkpointed and their
// leases released by then) and closes the connections.
func (r *replicas) close() {
	if r.renew != nil {
		r.renew()
	}
	_ = r.node.Close()
	_ = r.leases.Close()
}
