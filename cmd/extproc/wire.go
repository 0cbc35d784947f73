package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/codeinterp/codeinterp/internal/buildcache"
	"github.com/codeinterp/codeinterp/internal/checkpoint"
	"github.com/codeinterp/codeinterp/internal/checkpoint/blob"
	"github.com/codeinterp/codeinterp/internal/checkpoint/blob/dir"
	"github.com/codeinterp/codeinterp/internal/checkpoint/blob/s3"
	"github.com/codeinterp/codeinterp/internal/config"
	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/sandbox/wasm"
)

// The wiring: what the configuration's sections become in the packages'
// own options, resolved against this machine (the build cache, files the
// configuration names). The configuration itself knows none of it.

// wasmConfig maps the sandbox section onto the WASM provider's
// configuration. workerCommand is the worker binary (or this one plus its
// hidden worker command). Call resolvePaths first when runtime_dir or
// cache_dir are left empty.
func wasmConfig(cfg *config.Config, workerCommand []string) wasm.Config {
	s := cfg.Sandbox
	return wasm.Config{
		Config:        cfg.PoolConfig(),
		RuntimeDir:    s.RuntimeDir,
		CacheDir:      s.CacheDir,
		WorkerCommand: append([]string(nil), workerCommand...),

		ColdStart:              !s.Snapshot,
		SnapshotRotateSessions: s.SnapshotRotateSessions,
		SnapshotDir:            s.SnapshotDir,
	}
}

// runtimePrefix is the name prefix of the build script's output
// directories (runtime/build-python-wasi.sh: cpython-<version>-<recipe hash>).
const runtimePrefix = "cpython-" + wasm.RuntimeVersion + "-"

// errNoRuntime is matched by resolvePaths errors when no CPython-WASI
// runtime can be found.
var errNoRuntime = errors.New("no CPython-WASI runtime found: build it with `make runtime` (runtime/build-python-wasi.sh) or set sandbox.runtime_dir")

// resolvePaths fills an empty sandbox.runtime_dir and sandbox.cache_dir the
// way the build script lays them out, and checks that the runtime directory
// holds python.wasm. lookupEnv is os.LookupEnv outside tests.
//
//	runtime_dir: $CODEINTERP_RUNTIME_DIR if set (the build script writes
//	             there), else the most recently built complete (MANIFEST
//	             present) <cache root>/codeinterp/cpython-3.13.5-* directory;
//	cache_dir:   <cache root>/codeinterp/wazero;
//	cache root:  $XDG_CACHE_HOME, else $HOME/.cache.
func resolvePaths(cfg *config.Config, lookupEnv func(string) (string, bool)) error {
	s := &cfg.Sandbox
	root, rootErr := buildcache.Root(lookupEnv)
	if s.RuntimeDir == "" {
		if d, ok := lookupEnv("CODEINTERP_RUNTIME_DIR"); ok && d != "" {
			s.RuntimeDir = d
		} else if rootErr != nil {
			return fmt.Errorf("sandbox.runtime_dir: %v: %w", rootErr, errNoRuntime)
		} else {
			d, err := buildcache.Newest(root, runtimePrefix)
			if err != nil {
				return fmt.Errorf("sandbox.runtime_dir: %v: %w", err, errNoRuntime)
			}
			s.RuntimeDir = d
		}
	}
	if _, err := os.Stat(filepath.Join(s.RuntimeDir, "python.wasm")); err != nil {
		return fmt.Errorf("sandbox.runtime_dir: %s has no python.wasm (%w): %w", s.RuntimeDir, err, errNoRuntime)
	}
	if s.CacheDir == "" {
		if rootErr != nil {
			return fmt.Errorf("sandbox.cache_dir: %v; set it explicitly", rootErr)
		}
		s.CacheDir = filepath.Join(root, "wazero")
	}
	return nil
}

// egressConfig maps sandbox.network onto the egress proxy's bound, reading
// ca_file once. The PEM it read is returned too: a networked sandbox
// trusts it as well (gvisor.Config.ExtraCAPEM), for a private mirror it
// reaches through the proxy's tunnel.
func egressConfig(cfg *config.Config) (egress.Config, []byte, error) {
	n := cfg.Sandbox.Network
	ec := egress.Config{
		AllowedDomains: append([]string(nil), n.AllowedDomains...),
		MaxDomains:     n.MaxDomains,
		MaxBytes:       int64(n.MaxBytes),
		MaxConns:       n.MaxConnections,
		Resolve:        map[string]string{},
		DialTimeout:    n.DialTimeout,
		IdleTimeout:    n.IdleTimeout,
	}
	for k, v := range n.Resolve {
		ec.Resolve[k] = v
	}
	if n.CAFile == "" {
		return ec, nil, nil
	}
	pem, err := os.ReadFile(n.CAFile)
	if err != nil {
		return egress.Config{}, nil, fmt.Errorf("sandbox.network.ca_file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return egress.Config{}, nil, fmt.Errorf("sandbox.network.ca_file: %s holds no PEM certificate", n.CAFile)
	}
	ec.RootCAs = pool
	return ec, pem, nil
}

// checkpointKey loads (or, on one host, makes) the checkpoint key.
func checkpointKey(cfg *config.Config, lookupEnv func(string) (string, bool)) ([]byte, error) {
	k := cfg.Checkpoints
	keyFile := k.KeyFile
	if k.Key == "" && keyFile == "" {
		root, err := buildcache.Root(lookupEnv)
		if err != nil {
			return nil, fmt.Errorf("checkpoints.key_file: %v; set checkpoints.key or key_file", err)
		}
		keyFile = filepath.Join(root, "checkpoint.key")
	}
	key, err := checkpoint.LoadKey(k.Key, keyFile)
	if err != nil {
		return nil, fmt.Errorf("checkpoints: %w", err)
	}
	return key, nil
}

// checkpointKeeper is openKeeper with the process's environment and its
// metrics registered on reg.
func checkpointKeeper(ctx context.Context, cfg *config.Config, origin string, reg prometheus.Registerer) (*checkpoint.Keeper, error) {
	k, err := openKeeper(ctx, cfg, origin, os.LookupEnv)
	if err != nil || k == nil {
		return k, err
	}
	return k, k.Instrument(reg)
}

// openKeeper opens the checkpoint store and key and returns the Keeper of
// origin's checkpoints, or nil when checkpoints are off. lookupEnv finds
// the build cache's root for the default paths.
func openKeeper(ctx context.Context, cfg *config.Config, origin string, lookupEnv func(string) (string, bool)) (*checkpoint.Keeper, error) {
	k := cfg.Checkpoints
	if !k.Enabled {
		return nil, nil
	}
	key, err := checkpointKey(cfg, lookupEnv)
	if err != nil {
		return nil, err
	}
	sealer, err := checkpoint.NewSealer(key)
	if err != nil {
		return nil, err
	}
	var st blob.Store
	switch k.Store {
	case "s3":
		st, err = s3.New(ctx, s3.Config{Endpoint: k.S3.Endpoint, Bucket: k.S3.Bucket, Prefix: k.S3.Prefix, Region: k.S3.Region,
			AccessKey: k.S3.AccessKey, SecretKey: k.S3.SecretKey, PathStyle: k.S3.PathStyle})
	default:
		d := k.Dir
		if d == "" {
			root, rootErr := buildcache.Root(lookupEnv)
			if rootErr != nil {
				return nil, fmt.Errorf("checkpoints.dir: %v; set it", rootErr)
			}
			d = filepath.Join(root, "checkpoints")
		}
		st, err = dir.New(d)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoints: %w", err)
	}
	return checkpoint.NewKeeper(sealer, st, origin, int(k.MaxBytes)), nil
}

// clusterSecret returns the secret forwarded runs are authenticated with:
// cluster.secret, else one derived from checkpoints.key (every replica
// has that key), else "" (the caller keeps one in Redis).
func clusterSecret(cfg *config.Config, lookupEnv func(string) (string, bool)) (string, error) {
	if cfg.Cluster.Secret != "" {
		return cfg.Cluster.Secret, nil
	}
	// Only a key given to every replica (a Secret): a key file is each
	// pod's own in Kubernetes.
	if !cfg.Checkpoints.Enabled || cfg.Checkpoints.Key == "" {
		return "", nil
	}
	key, err := checkpointKey(cfg, lookupEnv)
	if err != nil {
		return "", err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("codeinterp cluster secret v1"))
	return hex.EncodeToString(mac.Sum(nil)), nil
}
