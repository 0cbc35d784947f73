package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/api"
	"github.com/codeinterp/codeinterp/config"
	"github.com/codeinterp/codeinterp/containers"
	"github.com/codeinterp/codeinterp/store"
	"github.com/codeinterp/codeinterp/store/memory"
	"github.com/codeinterp/codeinterp/store/redis"
)

// newStore opens the configured store: one per process, shared by the
// API and the interceptor.
// Its bounds are the ones in force (config.Config.StoreLimits).
func newStore(ctx context.Context, cfg *config.Config) (store.Store, error) {
	c, limits := cfg.Store, cfg.StoreLimits()
	switch c.Backend {
	case config.StoreRedis:
		// Bounded: a server that cannot reach its store must say so at
		// start, not hang there.
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		st, err := redis.New(cctx, c.RedisURL, limits, nil)
		if err != nil {
			return nil, fmt.Errorf("store.redis_url: %w", err)
		}
		return st, nil
	case config.StoreMemory:
		return memory.New(limits, nil), nil
	}
	return nil, fmt.Errorf("store.backend: %q is not one of memory, redis", c.Backend)
}

// responseStore is the response store of the process, with its Close.
type responseStore interface {
	store.Responses
	Close() error
}

// newResponses opens the response store in the store's backend: Redis
// with store.backend redis (so every replica continues every response),
// else in process.
func newResponses(ctx context.Context, cfg *config.Config) (responseStore, error) {
	limits := cfg.ResponseLimits()
	if cfg.Store.Backend == config.StoreRedis {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		rs, err := redis.NewResponses(cctx, cfg.Store.RedisURL, limits, nil)
		if err != nil {
			return nil, fmt.Errorf("store.redis_url: %w", err)
		}
		return rs, nil
	}
	return inProcess{memory.NewResponses(limits, nil)}, nil
}

// conversationStore is the conversation store of the process.
type conversationStore interface {
	store.Conversations
	Close() error
}

// newConversations opens the conversation store in the store's backend.
func newConversations(ctx context.Context, cfg *config.Config) (conversationStore, error) {
	limits := cfg.ConversationLimits()
	if cfg.Store.Backend == config.StoreRedis {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		cs, err := redis.NewConversations(cctx, cfg.Store.RedisURL, limits, nil)
		if err != nil {
			return nil, fmt.Errorf("store.redis_url: %w", err)
		}
		return cs, nil
	}
	return inProcessConversations{memory.NewConversations(limits, nil)}, nil
}

// inProcessConversations is an in-process conversation store, which holds
// nothing to close.
type inProcessConversations struct{ *memory.Conversations }

func (inProcessConversations) Close() error { return nil }

// inProcess is an in-process response store, which holds nothing to close.
type inProcess struct{ *memory.Responses }

func (inProcess) Close() error { return nil }

// apiConfig maps the configuration onto the API server's.
func apiConfig(cfg *config.Config) api.Config {
	return api.Config{
		AuthHeaders:          cfg.API.AuthHeaders,
		DefaultExpiryMinutes: int(cfg.API.DefaultExpiry / time.Minute),
		MaxExpiryMinutes:     int(cfg.API.MaxExpiry / time.Minute),
		MaxMemoryLimit:       int64(cfg.Interceptor.MaxMemoryLimit),
		MaxUploadBytes:       cfg.MaxUploadBytes(),
		Anonymous:            cfg.API.Anonymous,
		FilesSource:          cfg.Files.Source,
		FilesUpstreamURL:     cfg.Files.UpstreamURL,
		FileLifetime:         cfg.Store.Limits.FileLifetime,
	}
}

// startAPI serves the Containers and Files APIs on api.listen.
// Creates go through the containers manager, so an explicit create at the
// owner_containers quota recycles an idle auto container as a response's
// does.
func startAPI(cfg *config.Config, st store.Store, rs store.Responses, cs store.Conversations, mgr *containers.Manager, log *zap.Logger, errc chan<- error) (*http.Server, net.Listener, error) {
	ac := apiConfig(cfg)
	ac.Create = mgr.Create
	// Stored responses: ours from rs, the model server's through the
	// upstream (the Envoy listener without the filter), with the caller's
	// credential as follow-ups carry it.
	ac.Responses = rs
	ac.Conversations = cs
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
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() {
		if err := hs.Serve(lis); err != nil && err != http.ErrServerClosed {
			errc <- fmt.Errorf("api: %w", err)
		}
	}()
	return hs, lis, nil
}
