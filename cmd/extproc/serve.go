package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/codeinterp/codeinterp/internal/config"
)

// runServe runs the ext_proc gRPC server until ctx ends, then drains.
func runServe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	configPath := fs.String("config", "", "YAML configuration `FILE` (empty: defaults plus CODEINTERP_* environment)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: extproc serve --config FILE")
		fs.PrintDefaults()
	}
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &usageError{fmt.Sprintf("serve: unexpected argument %q", fs.Arg(0))}
	}
	cfg, err := config.Load(*configPath, checkOptions)
	if err != nil {
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
	log.Info("serving", zap.String("grpc", a.grpcAddr.String()), zap.String("admin", a.adminAddr()),
		zap.String("api", a.apiAddr()), zap.String("store", cfg.Store.Backend), zap.String("upstream", cfg.Upstream.URL))
	select {
	case <-ctx.Done():
		log.Info("shutting down: draining streams", zap.Duration("timeout", cfg.Server.ShutdownTimeout))
	case err = <-a.errc:
		log.Error("server failed", zap.Error(err))
	}
	a.shutdown(cfg.Server.ShutdownTimeout)
	return err
}

// warnUnknownEnv names CODEINTERP_* variables that match no field: a typo
// there would otherwise silently leave a default in force.
func warnUnknownEnv(log *zap.Logger) {
	for _, name := range config.UnknownEnv(os.Environ()) {
		log.Warn("environment variable matches no configuration field; ignored", zap.String("name", name))
	}
}

// newLogger builds the zap logger the configuration asks for.
func newLogger(c config.Logging) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.Set(c.Level); err != nil {
		return nil, fmt.Errorf("logging.level: %w", err)
	}
	zc := zap.NewProductionConfig()
	if c.Format == "console" {
		zc = zap.NewDevelopmentConfig()
	}
	zc.Level = zap.NewAtomicLevelAt(lvl)
	zc.Sampling = nil // one line per request; never drop them
	return zc.Build()
}
