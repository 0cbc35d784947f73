package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/codeinterp/codeinterp/internal/config"
	"github.com/codeinterp/codeinterp/internal/devproxy"
)

// runDev runs the server and, in front of it, the Envoy-like proxy from
// package devproxy, so a laptop or a test needs no Envoy. Production runs
// Envoy.
func runDev(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "HTTP `ADDR` clients use as their OpenAI base URL host")
	upstream := fs.String("upstream", "", "model server `URL` (scheme://host[:port][/prefix]), e.g. http://127.0.0.1:8000 for vLLM, http://127.0.0.1:11434 for Ollama, https://api.openai.com")
	configPath := fs.String("config", "", "YAML configuration `FILE` (its upstream.url is replaced by --upstream)")
	grpcListen := fs.String("grpc-listen", "127.0.0.1:0", "ext_proc gRPC `ADDR` (port 0 picks a free one)")
	adminListen := fs.String("admin-listen", "", "health, metrics and the operator's usage view HTTP `ADDR` (empty: none)")
	apiListen := fs.String("api-listen", "127.0.0.1:0", "Containers and Files API `ADDR` the proxy routes /v1/containers and /v1/files to (port 0 picks a free one; empty: no API)")
	msgTimeout := fs.Duration("message-timeout", 10*time.Second, "Envoy ext_proc message_timeout to emulate")
	maxMsgTimeout := fs.Duration("max-message-timeout", 900*time.Second, "Envoy ext_proc max_message_timeout to emulate")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: extproc dev --listen ADDR --upstream URL [--config FILE]")
		fs.PrintDefaults()
	}
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &usageError{fmt.Sprintf("dev: unexpected argument %q", fs.Arg(0))}
	}
	up, err := url.Parse(*upstream)
	if *upstream == "" || err != nil || (up.Scheme != "http" && up.Scheme != "https") || up.Host == "" {
		return &usageError{fmt.Sprintf("dev: --upstream must be an absolute http(s) URL, got %q", *upstream)}
	}
	if *msgTimeout <= 0 || *maxMsgTimeout < 0 {
		return &usageError{"dev: --message-timeout must be positive and --max-message-timeout not negative"}
	}
	cfg, err := config.Load(*configPath, checkOptions)
	if err != nil {
		return err
	}
	// Without Envoy there is no internal listener: follow-ups go to the
	// model server directly, at the first handled path.
	cfg.Upstream.URL = strings.TrimSuffix(up.String(), "/") + cfg.Routes.Paths[0]
	cfg.Server.Listen = *grpcListen
	cfg.Server.AdminListen = *adminListen
	cfg.API.Listen = *apiListen
	if *adminListen == "" {
		cfg.Metrics.Enabled = false // they are served on the admin listener only
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	log, err := newLogger(cfg.Logging)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	warnUnknownEnv(log)

	a, err := startApp(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.shutdown(cfg.Server.ShutdownTimeout)
	if err := waitWarm(ctx, a.provider, 60*time.Second); err != nil {
		return err
	}
	cc, err := grpc.NewClient(a.grpcAddr.String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(cfg.Server.GRPCMaxRecvBytes()), grpc.MaxCallSendMsgSize(cfg.Server.GRPCMaxRecvBytes())))
	if err != nil {
		return fmt.Errorf("dev: ext_proc client: %w", err)
	}
	defer cc.Close()
	proxy, err := devproxy.New(devproxy.Config{
		Upstream:          up,
		Routes:            devRoutes(cfg, a.apiAddr()),
		Processor:         extprocv3.NewExternalProcessorClient(cc),
		MessageTimeout:    *msgTimeout,
		MaxMessageTimeout: *maxMsgTimeout,
		AllowModeOverride: true,
		BufferLimit:       int64(cfg.Server.MaxBodyBytes),
		Logger:            log.Named("devproxy"),
	})
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	hs := &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
	herr := make(chan error, 1)
	go func() { herr <- hs.Serve(lis) }()
	log.Info("dev proxy ready (an Envoy stand-in; production runs Envoy)",
		zap.String("listen", "http://"+lis.Addr().String()), zap.String("upstream", up.String()),
		zap.String("grpc", a.grpcAddr.String()), zap.String("api", a.apiAddr()), zap.String("admin", a.adminAddr()))
	fmt.Fprintf(os.Stderr, "extproc dev: OPENAI_BASE_URL=http://%s/v1 → %s\n", lis.Addr(), up)

	select {
	case <-ctx.Done():
		err = nil
	case err = <-herr:
	case err = <-a.errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownTimeout)
	defer cancel()
	_ = hs.Shutdown(sctx)
	return err
}

// devRoutes is the dev proxy's route table, as deploy/envoy/envoy.yaml's:
// /v1/containers, /v1/files unless the upstream serves it (files.source:
// upstream), /v1/responses/… (stored responses), /v1/conversations and
// /v1/skills go to the API without
// the ext_proc filter.
func devRoutes(cfg *config.Config, apiAddr string) []devproxy.Route {
	if apiAddr == "" {
		return nil
	}
	cluster := &url.URL{Scheme: "http", Host: apiAddr}
	routes := []devproxy.Route{{Name: "containers", PathSeparatedPrefix: "/v1/containers", Cluster: cluster, ExtProcDisabled: true}}
	if cfg.Files.Source != config.FilesUpstream {
		routes = append(routes, devproxy.Route{Name: "files", PathSeparatedPrefix: "/v1/files", Cluster: cluster, ExtProcDisabled: true})
	}
	// Stored responses (POST /v1/responses itself takes the default route
	// through the filter) and conversations.
	return append(routes,
		devproxy.Route{Name: "stored-responses", Prefix: "/v1/responses/", Cluster: cluster, ExtProcDisabled: true},
		devproxy.Route{Name: "conversations", PathSeparatedPrefix: "/v1/conversations", Cluster: cluster, ExtProcDisabled: true},
		devproxy.Route{Name: "skills", PathSeparatedPrefix: "/v1/skills", Cluster: cluster, ExtProcDisabled: true},
		devproxy.Route{Name: "code-interpreter-usage", Path: "/v1/organization/usage/code_interpreter_sessions", Cluster: cluster, ExtProcDisabled: true})
}
