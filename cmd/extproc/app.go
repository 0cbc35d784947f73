package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/codeinterp/codeinterp/internal/api"
	"github.com/codeinterp/codeinterp/internal/background"
	"github.com/codeinterp/codeinterp/internal/checkpoint"
	"github.com/codeinterp/codeinterp/internal/config"
	"github.com/codeinterp/codeinterp/internal/containers"
	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/filter"
	"github.com/codeinterp/codeinterp/internal/interceptor"
	"github.com/codeinterp/codeinterp/internal/messages"
	"github.com/codeinterp/codeinterp/internal/netpolicy"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/wasm"
	"github.com/codeinterp/codeinterp/internal/sandbox/worker"
	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/telemetry"
)

// app is the running server: the store, sandbox pool, interceptor,
// ext_proc service, gRPC server with health, the admin HTTP server and the
// Containers and Files API server.
type app struct {
	log *zap.Logger
	// store is the one store of the process: the API serves it and the
	// interceptor's containers live in it.
	store store.Store
	// responses keeps the responses the interceptor made, conversations
	// OpenAI's Conversations.
	responses     responseStore
	conversations conversationStore
	// skills keeps OpenAI's skills, which containers mount.
	skills skillStore
	// background drives the background responses started here (nil: off).
	background *backgroundRuns
	// usage accounts sessions and runs per owner.
	usage usageStore
	// telemetry exports the spans (flushed last at shutdown).
	telemetry *telemetry.Telemetry
	// containers holds the interpreters of containers between responses.
	containers *containers.Manager
	api        *http.Server
	apiLis     net.Listener
	provider   sandbox.Provider
	egress     *egress.Proxy // nil: no session has a network
	grpc       *grpc.Server
	health     *health.Server
	grpcAddr   net.Addr
	replicas   *replicas // nil: no cluster (one replica)
	admin      *http.Server
	adminLis   net.Listener
	errc       chan error
	stop       context.CancelFunc
}

func startApp(ctx context.Context, cfg *config.Config, log *zap.Logger) (a *app, err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("locating this binary for sandbox workers: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := filter.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	for _, l := range loweredLimits(cfg) {
		log.Warn(l)
	}
	st, err := newStore(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = st.Close()
		}
	}()
	rs, err := newResponses(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = rs.Close()
		}
	}()
	cs, err := newConversations(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = cs.Close()
		}
	}()
	sk, err := newSkills(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = sk.Close()
		}
	}()
	us, err := newUsage(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = us.Close()
		}
	}()
	tel, err := telemetry.Setup(ctx, telemetryConfig(cfg))
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = tel.Shutdown(context.Background())
		}
	}()
	bg, err := startBackground(ctx, cfg, rs, log.Named("background"))
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && bg != nil {
			bg.close(0)
		}
	}()
	eg, caPEM, err := newEgress(cfg, reg, tel, log.Named("egress"))
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && eg != nil {
			_ = eg.Close()
		}
	}()
	// Checkpoints of interpreter state: the wasm provider's sessions, and
	// the snapshots they are taken over (the pool keeps those); a
	// checkpoint is bound to the worker's fingerprint (its protocol,
	// kernel and snapshot recipe), so no other build restores it.
	var keeper *checkpoint.Keeper
	var bases wasm.Bases
	if cfg.Sandbox.Provider == config.ProviderWASM {
		if keeper, err = checkpointKeeper(ctx, cfg, "wasm/"+worker.Fingerprint(), reg); err != nil {
			return nil, err
		}
		if keeper != nil {
			bases = keeper
		}
	}
	egressUsed := func(owner string, n int64) {
		if err := us.Add(context.Background(), owner, time.Now(), store.UsageDelta{EgressBytes: n}); err != nil {
			log.Warn("egress bytes not accounted in the usage", zap.Error(err))
		}
	}
	p, origin, err := newProvider(ctx, cfg, self, false, eg, caPEM, egressUsed, bases, log.Named("sandbox"))
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = p.Close()
		}
	}()
	// gVisor session checkpoints are bound to runsc, the root and the
	// kernel, known once the provider is prepared.
	if keeper == nil && origin != "" {
		if keeper, err = checkpointKeeper(ctx, cfg, origin, reg); err != nil {
			return nil, err
		}
	}
	prov, err := metrics.InstrumentProvider(p)
	if err != nil {
		return nil, err
	}
	// Containers outlive a response: their files are in the store, their
	// interpreters are held here while capacity allows.
	files, err := api.NewFetcher(apiConfig(cfg), st)
	if err != nil {
		return nil, err
	}
	ccfg := containers.Config{
		Usage:          us,
		RestoreExpired: cfg.Containers.RestoreExpired,
		ExpiryMinutes:  int(cfg.API.DefaultExpiry / time.Minute),
		MaxFileBytes:   storeLimits(cfg).FileBytes,
		Files:          files,
		Skills:         sk,
	}
	if keeper != nil {
		ccfg.Checkpoints, ccfg.CheckpointAfter = keeper, cfg.Checkpoints.After
		log.Info("container checkpoints", zap.String("store", cfg.Checkpoints.Store), zap.Duration("after", cfg.Checkpoints.After))
	}
	var mgr *containers.Manager
	var reps *replicas
	if cfg.ClusterActive() {
		if reps, err = newReplicas(ctx, cfg, reg, func() *containers.Manager { return mgr }, log.Named("cluster")); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				reps.close()
			}
		}()
		ccfg.Placement = reps.node
	}
	mgr = containers.New(ccfg, st, prov, log.Named("containers"))
	defer func() {
		if err != nil {
			_ = mgr.Close()
		}
	}()
	// A background response's end goes through its run's compare-and-set:
	// a cancel that settled it first is not overwritten.
	var irs store.Responses = rs
	if bg != nil {
		irs = background.Settled(rs, bg.store)
	}
	ic, err := interceptor.New(interceptorConfig(cfg), prov, log.Named("interceptor"), interceptor.WithContainers(mgr), interceptor.WithResponses(irs), interceptor.WithConversations(cs),
		interceptor.WithNetwork(checker(eg)), interceptor.WithTelemetry(tel), interceptor.WithUsage(us))
	if err != nil {
		return nil, err
	}
	fc := filterConfig(cfg)
	fc.Telemetry = tel
	if bg != nil {
		fc.Background = bg.runner
	}
	if len(cfg.Routes.MessagesPaths) > 0 {
		env := prov.Environment()
		mp, err := messages.New(messagesConfig(cfg, env), mgr, env.Shell, log.Named("messages"))
		if err != nil {
			return nil, err
		}
		fc.Routes = append(fc.Routes, messagesRoute(cfg, mp))
	}
	fsrv, err := filter.New(fc, ic.Processor(), metrics, log.Named("filter"))
	if err != nil {
		return nil, err
	}

	lis, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return nil, fmt.Errorf("server.listen: %w", err)
	}
	max := cfg.Server.GRPCMaxRecvBytes()
	gs := grpc.NewServer(
		grpc.MaxRecvMsgSize(max), grpc.MaxSendMsgSize(max),
		// Envoy keeps its HTTP/2 connection to the cluster open and pings it.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	)
	extprocv3.RegisterExternalProcessorServer(gs, fsrv)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	setServing(hs, false)

	actx, stop := context.WithCancel(context.Background())
	a = &app{log: log, store: st, responses: rs, conversations: cs, skills: sk, background: bg, telemetry: tel, usage: us, containers: mgr, provider: prov, egress: eg, grpc: gs, health: hs, grpcAddr: lis.Addr(), errc: make(chan error, 3), stop: stop}
	go func() {
		if err := gs.Serve(lis); err != nil {
			a.errc <- fmt.Errorf("grpc: %w", err)
		}
	}()
	go a.watchReadiness(actx)
	if reps != nil {
		a.replicas = reps
		reps.start(a.errc)
	}
	if keeper != nil {
		go sweepCheckpoints(actx, keeper, cfg.Checkpoints.TTL, log.Named("checkpoints"))
	}

	if cfg.Server.AdminListen != "" {
		alis, err := net.Listen("tcp", cfg.Server.AdminListen)
		if err != nil {
			a.shutdown(time.Second)
			return nil, fmt.Errorf("server.admin_listen: %w", err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
		mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
			if err := prov.Ready(r.Context()); err != nil {
				http.Error(w, "sandbox not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ok\n"))
		})
		// Every owner's usage, by owner hash: the operator's view, here only.
		held, _ := st.(store.OwnerBytes)
		mux.Handle("GET /usage/code_interpreter_sessions", api.UsageHandler(us, held, log.Named("usage")))
		if cfg.Metrics.Enabled {
			mux.Handle("GET "+cfg.Metrics.Path, promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true}))
		}
		a.admin = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		a.adminLis = alis
		go func() {
			if err := a.admin.Serve(alis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.errc <- fmt.Errorf("admin: %w", err)
			}
		}()
	}
	if cfg.API.Listen != "" {
		a.api, a.apiLis, err = startAPI(cfg, st, rs, cs, sk, us, bg, tel, mgr, eg, log.Named("api"), a.errc)
		if err != nil {
			a.shutdown(time.Second)
			return nil, err
		}
	}
	return a, nil
}

func (a *app) apiAddr() string {
	if a.apiLis == nil {
		return ""
	}
	return a.apiLis.Addr().String()
}

func (a *app) adminAddr() string {
	if a.adminLis == nil {
		return ""
	}
	return a.adminLis.Addr().String()
}

// setServing sets both the server-wide status and the ext_proc service's.
func setServing(hs *health.Server, ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	hs.SetServingStatus("", st)
	hs.SetServingStatus(extprocv3.ExternalProcessor_ServiceDesc.ServiceName, st)
}

// sweepCheckpoints expires the checkpoint store's old checkpoints and
// bases, at start and hourly, until ctx ends. Several replicas sweeping
// one store remove the same old blobs; that is harmless.
func sweepCheckpoints(ctx context.Context, k *checkpoint.Keeper, ttl time.Duration, log *zap.Logger) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		n, err := k.Sweep(ctx, ttl)
		if err != nil && ctx.Err() == nil {
			log.Warn("sweeping old checkpoints failed", zap.Error(err))
		} else if n > 0 {
			log.Info("old checkpoints removed", zap.Int("count", n))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// watchReadiness keeps the gRPC health status in step with the sandbox:
// Envoy's health checks then stop sending streams to a replica that cannot
// run code.
func (a *app) watchReadiness(ctx context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	last := false
	for {
		ready := a.provider.Ready(ctx) == nil
		if ready != last {
			setServing(a.health, ready)
			a.log.Info("health", zap.Bool("serving", ready))
			last = ready
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// shutdown reports NOT_SERVING, drains open streams for up to timeout,
// then stops the rest.
func (a *app) shutdown(timeout time.Duration) {
	a.stop()
	a.health.Shutdown()
	// The API drains alongside the streams, within the same timeout.
	apiDone := make(chan struct{})
	go func() {
		defer close(apiDone)
		if a.api == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := a.api.Shutdown(ctx); err != nil {
			a.log.Warn("API drain timed out; closing remaining requests", zap.Error(err))
			_ = a.api.Close()
		}
	}()
	// Background runs may finish within the timeout too; the rest end
	// failed, so none is left in_progress.
	bgDone := make(chan struct{})
	go func() {
		defer close(bgDone)
		if a.background != nil {
			a.background.close(timeout)
		}
	}()
	// Runs other replicas forwarded here finish alongside; new ones wait
	// for this server to checkpoint and release their containers.
	repsDone := make(chan struct{})
	go func() {
		defer close(repsDone)
		if a.replicas != nil {
			a.replicas.drain(timeout)
		}
	}()
	if !stopGracefully(a.grpc, timeout) {
		a.log.Warn("drain timed out; closed the remaining streams", zap.Duration("timeout", timeout))
	}
	if a.admin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = a.admin.Shutdown(ctx)
		cancel()
	}
	<-apiDone
	<-repsDone
	<-bgDone
	_ = a.containers.Close()
	if a.replicas != nil {
		a.replicas.close()
	}
	if err := a.provider.Close(); err != nil {
		a.log.Warn("closing the sandbox", zap.Error(err))
	}
	if a.egress != nil {
		if err := a.egress.Close(); err != nil {
			a.log.Warn("egress proxy close", zap.Error(err))
		}
	}
	// The spans of the drain are exported before the process ends.
	fctx, fcancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := a.telemetry.Shutdown(fctx); err != nil {
		a.log.Warn("exporting the last spans", zap.Error(err))
	}
	fcancel()
	// Last: nothing uses the stores any more.
	if err := a.store.Close(); err != nil {
		a.log.Warn("closing the store", zap.Error(err))
	}
	if err := a.responses.Close(); err != nil {
		a.log.Warn("closing the response store", zap.Error(err))
	}
	if err := a.conversations.Close(); err != nil {
		a.log.Warn("closing the conversation store", zap.Error(err))
	}
	if err := a.skills.Close(); err != nil {
		a.log.Warn("closing the skill store", zap.Error(err))
	}
	if err := a.usage.Close(); err != nil {
		a.log.Warn("closing the usage store", zap.Error(err))
	}
}

// waitWarm waits until the sandbox is ready and has an interpreter started,
// so the first request is not the one that pays for it.
func waitWarm(ctx context.Context, p sandbox.Provider, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		err := p.Ready(ctx)
		c := p.Capacity()
		if err == nil && (c.Warm > 0 || c.Max == 0) {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				return nil // ready, just slow to warm: serve anyway
			}
			return fmt.Errorf("sandbox not ready after %s: %w", limit, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checker is eg as the interceptor's and the API's bound on network
// policies: nil (no network) when there is no proxy.
func checker(eg *egress.Proxy) netpolicy.Checker {
	if eg == nil {
		return nil
	}
	return eg
}

// stopGracefully stops srv, letting its calls under way finish within
// timeout and cutting the rest; it reports whether they all finished.
func stopGracefully(srv *grpc.Server, timeout time.Duration) bool {
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		srv.Stop()
		<-done
		return false
	}
}
