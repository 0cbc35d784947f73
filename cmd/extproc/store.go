package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/api"
	"github.com/codeinterp/codeinterp/internal/background"
	"github.com/codeinterp/codeinterp/internal/config"
	"github.com/codeinterp/codeinterp/internal/containers"
	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/netpolicy"
	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/memory"
	"github.com/codeinterp/codeinterp/internal/store/redis"
	"github.com/codeinterp/codeinterp/internal/telemetry"
)

// newStore opens the configured store: one per process, shared by the
// API and the interceptor.
// Its bounds are the ones in force (config.Config.StoreLimits).
func newStore(ctx context.Context, cfg *config.Config) (store.Store, error) {
	l := storeLimits(cfg)
	return openBackend(ctx, cfg,
		func(ctx context.Context, url string) (store.Store, error) { return redis.New(ctx, url, l, nil) },
		func() store.Store { return memory.New(l, nil) })
}

// responseStore and conversationStore are the response and conversation
// stores of the process.
type (
	responseStore interface {
		store.Responses
		Close() error
	}
	conversationStore interface {
		store.Conversations
		Close() error
	}
	backgroundStore interface {
		store.Background
		Close() error
	}
	skillStore interface {
		store.Skills
		Close() error
	}
	usageStore interface {
		store.Usage
		Close() error
	}
)

// newUsage opens the usage accounts.
func newUsage(ctx context.Context, cfg *config.Config) (usageStore, error) {
	return openBackend(ctx, cfg,
		func(ctx context.Context, url string) (usageStore, error) { return redis.NewUsage(ctx, url, nil) },
		func() usageStore { return memory.NewUsage(nil) })
}

// openBackend opens one of the process's stores in the store's backend:
// Redis with store.backend redis (so every replica sees it), else in
// process. A server that cannot reach Redis says so at start.
func openBackend[S any](ctx context.Context, cfg *config.Config, inRedis func(ctx context.Context, url string) (S, error), inProcess func() S) (S, error) {
	var zero S
	switch cfg.Store.Backend {
	case config.StoreMemory:
		return inProcess(), nil
	case config.StoreRedis:
	default:
		return zero, fmt.Errorf("store.backend: %q is not one of memory, redis", cfg.Store.Backend)
	}
	// Bounded: a server that cannot reach its store must say so at start,
	// not hang there.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := inRedis(cctx, cfg.Store.RedisURL)
	if err != nil {
		return zero, fmt.Errorf("store.redis_url: %w", err)
	}
	return s, nil
}

// newResponses opens the response store.
func newResponses(ctx context.Context, cfg *config.Config) (responseStore, error) {
	l := responseLimits(cfg)
	return openBackend(ctx, cfg,
		func(ctx context.Context, url string) (responseStore, error) {
			return redis.NewResponses(ctx, url, l, nil)
		},
		func() responseStore { return memory.NewResponses(l, nil) })
}

// newConversations opens the conversation store.
func newConversations(ctx context.Context, cfg *config.Config) (conversationStore, error) {
	l := conversationLimits(cfg)
	return openBackend(ctx, cfg,
		func(ctx context.Context, url string) (conversationStore, error) {
			return redis.NewConversations(ctx, url, l, nil)
		},
		func() conversationStore { return memory.NewConversations(l, nil) })
}

// newSkills opens the skill store (the documented default bounds,
// store.DefaultSkillLimits).
func newSkills(ctx context.Context, cfg *config.Config) (skillStore, error) {
	l := store.DefaultSkillLimits()
	return openBackend(ctx, cfg,
		func(ctx context.Context, url string) (skillStore, error) { return redis.NewSkills(ctx, url, l, nil) },
		func() skillStore { return memory.NewSkills(l, nil) })
}

// newBackground opens the background responses' store.
func newBackground(ctx context.Context, cfg *config.Config) (backgroundStore, error) {
	return openBackend(ctx, cfg,
		func(ctx context.Context, url string) (backgroundStore, error) {
			return redis.NewBackground(ctx, url, nil, redis.WithReaders(cfg.Responses.MaxResumedStreams))
		},
		func() backgroundStore { return memory.NewBackground(nil) })
}

// backgroundRuns are the process's background mode: the runner driving
// the runs it started and the store every replica shares.
type backgroundRuns struct {
	store  backgroundStore
	runner *background.Runner
}

// startBackground opens background mode, or nil when
// responses.max_background is 0.
func startBackground(ctx context.Context, cfg *config.Config, rs store.Responses, log *zap.Logger) (*backgroundRuns, error) {
	if cfg.Responses.MaxBackground == 0 {
		return nil, nil
	}
	bs, err := newBackground(ctx, cfg)
	if err != nil {
		return nil, err
	}
	r, err := background.New(backgroundConfig(cfg, bs, rs), log)
	if err != nil {
		_ = bs.Close()
		return nil, err
	}
	return &backgroundRuns{store: bs, runner: r}, nil
}

// close stops the runs (those still going after timeout end failed) and
// closes the store.
func (b *backgroundRuns) close(timeout time.Duration) {
	b.runner.Close(timeout)
	_ = b.store.Close()
}

// startAPI serves the Containers and Files APIs on api.listen.
// Creates go through the containers manager, so an explicit create at the
// owner_containers quota recycles an idle auto container as a response's
// does.
func startAPI(cfg *config.Config, st store.Store, rs store.Responses, cs store.Conversations, sk store.Skills, us store.Usage, bg *backgroundRuns, tel *telemetry.Telemetry, mgr *containers.Manager, eg *egress.Proxy, log *zap.Logger, errc chan<- error) (*http.Server, net.Listener, error) {
	ac := apiConfig(cfg)
	ac.Create = mgr.Create
	// network_policy on POST /v1/containers: bounded like the tool's, the
	// secrets held by the manager that runs the container's code.
	ac.Network = netpolicy.Gate{Provider: cfg.Sandbox.Provider, Checker: checker(eg)}
	ac.Secrets = mgr
	// Stored responses: ours from rs, the model server's through the
	// upstream (the Envoy listener without the filter), with the caller's
	// credential as follow-ups carry it.
	ac.Responses = rs
	ac.Conversations = cs
	ac.Skills = sk
	ac.Usage = us
	if bg != nil {
		ac.Background, ac.CancelLocal = bg.store, bg.runner.Cancel
	}
	ac.ResponsesUpstreamURL = cfg.Upstream.URL
	ac.ForwardHeaders = cfg.Upstream.ForwardHeaders
	ac.UpstreamHeaders = cfg.Upstream.Headers
	ac.HTTPClient = &http.Client{Timeout: cfg.Upstream.Timeout}
	h, err := api.New(ac, st, log)
	if err != nil {
		return nil, nil, err
	}
	lis, err := net.Listen("tcp", cfg.API.Listen)
	if err != nil {
		return nil, nil, fmt.Errorf("api.listen: %w", err)
	}
	// No WriteTimeout: a download of a large file to a slow client may
	// take long; the bodies themselves are bounded.
	hs := &http.Server{Handler: tel.Handler("api", h), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() {
		if err := hs.Serve(lis); err != nil && err != http.ErrServerClosed {
			errc <- fmt.Errorf("api: %w", err)
		}
	}()
	return hs, lis, nil
}
