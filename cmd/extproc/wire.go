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
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/codeinterp/codeinterp/internal/api"
	"github.com/codeinterp/codeinterp/internal/background"
	"github.com/codeinterp/codeinterp/internal/buildcache"
	"github.com/codeinterp/codeinterp/internal/checkpoint"
	"github.com/codeinterp/codeinterp/internal/checkpoint/blob"
	"github.com/codeinterp/codeinterp/internal/checkpoint/blob/dir"
	"github.com/codeinterp/codeinterp/internal/checkpoint/blob/s3"
	"github.com/codeinterp/codeinterp/internal/codeexec"
	"github.com/codeinterp/codeinterp/internal/config"
	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/filter"
	"github.com/codeinterp/codeinterp/internal/interceptor"
	"github.com/codeinterp/codeinterp/internal/messages"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/gvisor"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
	"github.com/codeinterp/codeinterp/internal/sandbox/wasm"
	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/telemetry"
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
		Config:        poolConfig(cfg),
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

// errNoClusterKey: replicas on Redis, with nothing to derive the
// cluster key from.
var errNoClusterKey = errors.New("no cluster key: set cluster.secret (CODEINTERP_CLUSTER_SECRET, at least 16 " +
	"characters, the same on every replica, from a Secret) or checkpoints.key; it is never kept in Redis")

// clusterSecret returns what the cluster key is derived from, the same
// on every replica and from the configuration only (never from Redis,
// which anyone who can write it would then hold): cluster.secret, else
// one derived from checkpoints.key (every replica has that key), else,
// with checkpoints in a directory (one host, or a volume every replica
// mounts), one derived from the checkpoint key file the replicas sharing
// that directory share (made by the first of them). Else errNoClusterKey:
// an S3 store's key file is each pod's own.
func clusterSecret(cfg *config.Config, lookupEnv func(string) (string, bool)) (string, error) {
	if cfg.Cluster.Secret != "" {
		return cfg.Cluster.Secret, nil
	}
	k := cfg.Checkpoints
	if !k.Enabled || (k.Key == "" && k.Store == "s3") {
		return "", errNoClusterKey
	}
	key, err := checkpointKey(cfg, lookupEnv)
	if err != nil {
		return "", err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("codeinterp cluster secret v1"))
	return hex.EncodeToString(mac.Sum(nil)), nil
}

// apiConfig maps the configuration onto the API server's.
func apiConfig(cfg *config.Config) api.Config {
	return api.Config{
		AuthHeaders:          cfg.API.AuthHeaders,
		DefaultExpiryMinutes: int(cfg.API.DefaultExpiry / time.Minute),
		MaxExpiryMinutes:     int(cfg.API.MaxExpiry / time.Minute),
		MaxMemoryLimit:       int64(cfg.Interceptor.MaxMemoryLimit),
		MaxUploadBytes:       maxUploadBytes(cfg),
		Anonymous:            cfg.API.Anonymous,
		FilesSource:          cfg.Files.Source,
		FilesUpstreamURL:     cfg.Files.UpstreamURL,
		FileLifetime:         cfg.Store.Limits.FileLifetime,

		MaxResumedStreams:         cfg.Responses.MaxResumedStreams,
		MaxResumedStreamsPerOwner: cfg.Responses.MaxResumedStreamsPerCredential,
	}
}

// gvisorConfig maps the sandbox section onto the gVisor provider's
// configuration.
func gvisorConfig(cfg *config.Config, self string) gvisor.Config {
	g := cfg.Sandbox.GVisor
	return gvisor.Config{
		RunscPath:       g.Runsc,
		Platform:        g.Platform,
		RootFS:          g.RootFS,
		PythonPath:      g.Python,
		StateDir:        g.StateDir,
		LauncherCommand: []string{self, launcherCommand},
		UID:             cfg.Sandbox.Isolation.UID,
		GID:             cfg.Sandbox.Isolation.GID,
		ImageMaxCount:   g.MaxImages,
		ImageMaxBytes:   int(g.MaxImageBytes),

		ColdStart:              !cfg.Sandbox.Snapshot,
		SnapshotRotateSessions: cfg.Sandbox.SnapshotRotateSessions,
		Limits:                 poolConfig(cfg).Limits,
	}
}

// interceptorConfig maps the interceptor section (and the body bound) onto
// the interceptor's options.
func interceptorConfig(cfg *config.Config) interceptor.Config {
	in := cfg.Interceptor
	return interceptor.Config{
		FunctionName:     in.FunctionName,
		MaxRounds:        in.MaxRounds,
		MaxParallelCalls: in.MaxParallelCalls,
		MaxToolCalls:     in.MaxToolCalls,
		MaxMemoryBytes:   int64(in.MaxMemoryLimit),
		FollowUp:         interceptor.FollowUpMode(in.FollowUp),
		MaxBodyBytes:     int(cfg.Server.MaxBodyBytes),
		InputFiles:       in.InputFiles,
		CallStatus:       in.CallStatus,
		History:          interceptor.HistoryMode(in.History),
	}
}

// filterConfig maps the server, routes and upstream sections onto the
// Envoy-facing filter's options.
func filterConfig(cfg *config.Config) filter.Config {
	return filter.Config{
		Paths:                  cfg.Routes.Paths,
		Methods:                cfg.Routes.Methods,
		MaxBodyBytes:           int64(cfg.Server.MaxBodyBytes),
		OverrideMessageTimeout: cfg.Server.OverrideMessageTimeout,
		AuthHeaders:            cfg.API.AuthHeaders,
		AnonymousShared:        cfg.API.Anonymous == config.AnonymousShared,
		SyntheticStreams:       cfg.Interceptor.Streaming == "synthetic",
		Upstream: filter.UpstreamConfig{
			URL:            cfg.Upstream.URL,
			ForwardHeaders: cfg.Upstream.ForwardHeaders,
			Headers:        cfg.Upstream.Headers,
			Timeout:        cfg.Upstream.Timeout,
		},
	}
}

// poolConfig maps the sandbox section onto what the pool needs whatever
// the provider.
func poolConfig(cfg *config.Config) pool.Config {
	s := cfg.Sandbox
	l := s.Limits
	var overheadCPUs float64
	if s.Provider == config.ProviderGVisor {
		overheadCPUs = config.GVisorOverheadCPUs
	}
	// Both kinds bound a checkpoint as they write it (gVisor's through
	// gvisorConfig's Limits, which are these).
	var checkpointBytes int64
	if cfg.Checkpoints.Enabled {
		checkpointBytes = int64(cfg.Checkpoints.MaxBytes)
	}
	return pool.Config{
		MaxSessions:       s.MaxSessions,
		WarmWorkers:       s.WarmWorkers,
		SessionsPerWorker: s.SessionsPerWorker,
		QueueWait:         s.QueueWait,
		Limits: pool.Limits{
			SourceBytes:         int(l.SourceBytes),
			RunTimeout:          l.RunTimeout,
			GuestMemoryBytes:    int64(l.GuestMemory),
			MaxGuestMemoryBytes: int64(l.MaxGuestMemory),
			WorkerOverheadBytes: int64(l.WorkerOverhead),
			StdoutBytes:         int(l.StdoutBytes),
			StderrBytes:         int(l.StderrBytes),
			ScratchBytes:        int64(l.ScratchBytes),
			Pids:                l.Pids,
			CPUs:                l.CPUs,
			WorkerOverheadCPUs:  overheadCPUs,
			CheckpointBytes:     checkpointBytes,
		},
		Isolation: pool.Isolation{
			Cgroup:       s.Isolation.Cgroup,
			CgroupParent: s.Isolation.CgroupParent,
			UID:          s.Isolation.UID,
			GID:          s.Isolation.GID,
		},
	}
}

// storeLimits are store.limits as the store enforces them. Every
// interpreter a container gets has all its files copied in, within the
// session's scratch space (sandbox.limits.scratch_bytes, less a page per
// file: sandbox.DataCapacity) and one file at most sandbox.MaxFileBytes; a
// container holding more would fail every run. So file_bytes and
// container_bytes are what a session holds when unset (0), and at most
// that when set, and an upload or a code's file past them is refused when
// it is made (413), never when it is used.
func storeLimits(cfg *config.Config) store.Limits {
	l := cfg.Store.Limits
	capacity := sandbox.DataCapacity(int64(cfg.Sandbox.Limits.ScratchBytes), l.ContainerFiles)
	atMost := func(set config.ByteSize, bound int64) int64 {
		if set == 0 {
			return bound
		}
		return min(int64(set), bound)
	}
	s := store.Limits{
		FileBytes:       atMost(l.FileBytes, min(sandbox.MaxFileBytes, capacity)),
		ContainerBytes:  atMost(l.ContainerBytes, capacity),
		ContainerFiles:  l.ContainerFiles,
		OwnerBytes:      int64(l.OwnerBytes),
		OwnerContainers: l.OwnerContainers,
		OwnerFiles:      l.OwnerFiles,
		FileLifetime:    l.FileLifetime,
		ExpiredMemory:   l.ExpiredMemory,
	}
	// containers.restore_expired keeps an expired container's files as
	// long as its checkpoint, and it is remembered as long after its files
	// are gone as without them.
	if cfg.Containers.RestoreExpired {
		s.ExpiredKeep = cfg.Checkpoints.TTL
		s.ExpiredMemory += s.ExpiredKeep
	}
	return s
}

// maxUploadBytes is api.max_upload_bytes as the API enforces it: the file
// bound in force when unset (0), and at most that when set.
func maxUploadBytes(cfg *config.Config) int64 {
	fb := storeLimits(cfg).FileBytes
	if cfg.API.MaxUploadBytes == 0 {
		return fb
	}
	return min(int64(cfg.API.MaxUploadBytes), fb)
}

// loweredLimits says, one line each, which bounds the operator set that
// storeLimits and maxUploadBytes lower, for the log at start and
// validate-config. The defaults are derived and never lowered, so a
// default configuration has none.
func loweredLimits(cfg *config.Config) []string {
	l, in := storeLimits(cfg), cfg.Store.Limits
	var out []string
	why := fmt.Sprintf("what one session holds (sandbox.limits.scratch_bytes %s for %d files, and at most %s a file)",
		cfg.Sandbox.Limits.ScratchBytes, in.ContainerFiles, config.ByteSize(sandbox.MaxFileBytes))
	if in.FileBytes != 0 && l.FileBytes < int64(in.FileBytes) {
		out = append(out, fmt.Sprintf("store.limits.file_bytes %s is lowered to %s: %s", in.FileBytes, config.ByteSize(l.FileBytes), why))
	}
	if in.ContainerBytes != 0 && l.ContainerBytes < int64(in.ContainerBytes) {
		out = append(out, fmt.Sprintf("store.limits.container_bytes %s is lowered to %s: %s", in.ContainerBytes, config.ByteSize(l.ContainerBytes), why))
	}
	if up := maxUploadBytes(cfg); cfg.API.MaxUploadBytes != 0 && up < int64(cfg.API.MaxUploadBytes) {
		out = append(out, fmt.Sprintf("api.max_upload_bytes %s is lowered to %s, the file bound in force", cfg.API.MaxUploadBytes, config.ByteSize(up)))
	}
	return out
}

// responseLimits are the bounds of the response store.
func responseLimits(cfg *config.Config) store.ResponseLimits {
	r := cfg.Responses
	return store.ResponseLimits{
		TTL:           r.TTL,
		ResponseBytes: int64(r.MaxResponseBytes),
		MaxHistory:    r.MaxHistory,
		Count:         r.MaxCount,
		Bytes:         int64(r.MaxBytes),
	}
}

// telemetryConfig maps the telemetry section onto the tracing set-up.
func telemetryConfig(cfg *config.Config) telemetry.Config {
	return telemetry.Config{Tracing: cfg.Telemetry.Tracing, CaptureContent: cfg.Telemetry.CaptureContent, Version: version()}
}

// backgroundConfig maps responses' background settings onto the runner's.
func backgroundConfig(cfg *config.Config, bs store.Background, rs store.Responses) background.Config {
	r := cfg.Responses
	return background.Config{
		Store: bs, Responses: rs,
		PerOwner: r.MaxBackground, Total: r.MaxBackgroundTotal,
		Lifetime: r.BackgroundLifetime, Keep: r.BackgroundEventsTTL,
	}
}

// conversationLimits are the bounds of the conversation store.
func conversationLimits(cfg *config.Config) store.ConversationLimits {
	v := cfg.Conversations
	return store.ConversationLimits{Items: v.MaxItems, Bytes: int64(v.MaxBytes), Conversations: v.MaxPerOwner}
}

// checkOptions runs the validators the packages own on the options the
// configuration maps to — one validator per setting, in the package whose
// meaning it is — and reports each problem as a *config.FieldError at the
// setting's YAML path. (Config.Validate checks what no package owns: the
// YAML's shape and the relations between sections.)
func checkOptions(cfg *config.Config) error {
	var errs []error
	add := func(section string, err error) {
		for _, e := range unjoin(err) {
			field, reason, ok := strings.Cut(e.Error(), ": ")
			if !ok {
				field, reason = "", e.Error()
			}
			path := section
			if field != "" {
				path += "." + field
			}
			errs = append(errs, &config.FieldError{Path: path, Reason: reason})
		}
	}
	add("sandbox", poolConfig(cfg).Validate())
	add("interceptor", interceptorConfig(cfg).Validate())
	if k := cfg.Checkpoints; k.Enabled {
		if k.Key != "" {
			if _, err := checkpoint.LoadKey(k.Key, ""); err != nil {
				add("checkpoints", fmt.Errorf("key: %w", err))
			}
		}
		if k.Store == "s3" && k.S3.Prefix != "" && blob.CheckPrefix(k.S3.Prefix) != nil {
			add("checkpoints.s3", fmt.Errorf("prefix: %q is not a key prefix ending in /", k.S3.Prefix))
		}
	}
	return errors.Join(errs...)
}

// unjoin splits an errors.Join result into its parts.
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// version is this build's main module version ("(devel)" from a checkout).
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.Main.Version
	}
	return ""
}

// messagesConfig maps the configuration onto the Messages API processor's
// (routes.messages_paths): the same round bound and run timeout as the
// Responses API's, the sandbox's stdout bound, and the call ids' key,
// derived from the cluster key's source when there is one (replicas then
// accept each other's calls in a history), else none (a key of this
// process: history from before a restart is refused).
func messagesConfig(cfg *config.Config, env sandbox.Environment) messages.Config {
	mc := messages.Config{
		MaxRounds:       cfg.Interceptor.MaxRounds,
		Limits:          codeexec.Limits{Timeout: cfg.Sandbox.Limits.RunTimeout, StdoutBytes: int(cfg.Sandbox.Limits.StdoutBytes)},
		MaxBodyBytes:    int(cfg.Server.MaxBodyBytes),
		ContainerExpiry: cfg.API.DefaultExpiry,
		Environment:     env,
	}
	if secret, err := clusterSecret(cfg, os.LookupEnv); err == nil {
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte("codeinterp messages call ids v1"))
		mc.Key = mac.Sum(nil)
	}
	return mc
}

// messagesRoute is the filter's route of the Messages API.
func messagesRoute(cfg *config.Config, p *messages.Processor) filter.Route {
	return filter.Route{
		Name:           "messages",
		Paths:          cfg.Routes.MessagesPaths,
		Processor:      p,
		UpstreamURL:    cfg.Upstream.MessagesUpstream(),
		ForwardHeaders: []string{"x-api-key", "anthropic-version", "anthropic-beta"},
		ErrorBody:      messages.ErrorBody,
	}
}
