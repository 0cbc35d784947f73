package main

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/api"
	"github.com/codeinterp/codeinterp/internal/config"
	"github.com/codeinterp/codeinterp/internal/filter"
	"github.com/codeinterp/codeinterp/internal/interceptor"
	"github.com/codeinterp/codeinterp/internal/sandbox/gvisor"
	"github.com/codeinterp/codeinterp/internal/sandbox/wasm"
	"github.com/codeinterp/codeinterp/internal/store"
)

// TestCheckpointKeeperDefaults: with nothing set, the key file and the
// store are made in the build cache's root; off, there is no Keeper.
func TestCheckpointKeeperDefaults(t *testing.T) {
	root := t.TempDir()
	env := func(k string) (string, bool) {
		if k == "XDG_CACHE_HOME" {
			return root, true
		}
		return "", false
	}
	c := config.Default()
	k, err := openKeeper(context.Background(), c, "wasm/x", env)
	if err != nil || k == nil {
		t.Fatalf("CheckpointKeeper: %v", err)
	}
	for _, p := range []string{"codeinterp/checkpoint.key", "codeinterp/checkpoints"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	c.Checkpoints.Enabled = false
	if k, err := openKeeper(context.Background(), c, "wasm/x", env); k != nil || err != nil {
		t.Fatalf("checkpoints off: %v, %v", k, err)
	}
}

// TestClusterSecret: every replica must compute the same secret from what
// they share — the configuration, or the key file of the checkpoint
// directory replicas on one host share — never from Redis; with nothing
// to derive it from, a clear error naming cluster.secret.
func TestClusterSecret(t *testing.T) {
	root := t.TempDir()
	env := func(string) (string, bool) { return root, true }
	try := func(change func(*config.Config)) (string, error) {
		t.Helper()
		c := config.Default()
		change(c)
		return clusterSecret(c, env)
	}
	with := func(change func(*config.Config)) string {
		t.Helper()
		s, err := try(change)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	key := func(b byte) string {
		k := make([]byte, 32)
		k[0] = b
		return base64.StdEncoding.EncodeToString(k)
	}
	if s := with(func(c *config.Config) { c.Cluster.Secret = "set-by-the-operator" }); s != "set-by-the-operator" {
		t.Fatalf("cluster.secret not used: %q", s)
	}
	a1 := with(func(c *config.Config) { c.Checkpoints.Key = key(1) })
	a2 := with(func(c *config.Config) { c.Checkpoints.Key = key(1) })
	b := with(func(c *config.Config) { c.Checkpoints.Key = key(2) })
	if a1 == "" || a1 != a2 || a1 == b || strings.Contains(a1, key(1)) {
		t.Fatalf("derived secrets: %q, %q, %q; want equal for one key, another for another, not the key", a1, a2, b)
	}
	// Two replicas on one host, nothing configured: the first makes the
	// checkpoint key file in the shared root, both derive the same secret
	// from it.
	f1 := with(func(*config.Config) {})
	f2 := with(func(c *config.Config) { c.Checkpoints.Dir = filepath.Join(root, "elsewhere") })
	if f1 == "" || f1 != f2 || f1 == a1 {
		t.Fatalf("secrets from the shared key file: %q, %q", f1, f2)
	}
	if _, err := os.Stat(filepath.Join(root, "codeinterp", "checkpoint.key")); err != nil {
		t.Fatalf("no key file was made in the shared root: %v", err)
	}
	// Nothing shared: checkpoints off, or in S3 with only a pod's own key
	// file.
	for name, change := range map[string]func(*config.Config){
		"checkpoints off": func(c *config.Config) { c.Checkpoints.Enabled, c.Checkpoints.Key = false, key(1) },
		"s3, no key": func(c *config.Config) {
			c.Checkpoints.Store, c.Checkpoints.S3.Endpoint, c.Checkpoints.S3.Bucket = "s3", "https://s3.example.com", "b"
		},
	} {
		if s, err := try(change); err == nil || s != "" || !strings.Contains(err.Error(), "cluster.secret") {
			t.Fatalf("%s: %q, %v; want an error naming cluster.secret", name, s, err)
		}
	}
	if s := with(func(c *config.Config) {
		c.Checkpoints.Store, c.Checkpoints.S3.Endpoint, c.Checkpoints.S3.Bucket = "s3", "https://s3.example.com", "b"
		c.Checkpoints.Key = key(1)
	}); s != a1 {
		t.Fatalf("s3 with checkpoints.key: %q, want %q", s, a1)
	}
}

// TestReplicasRefuseToStartWithoutAKey: a cluster on Redis with no key
// to be had does not start (and does not make one up in Redis).
func TestReplicasRefuseToStartWithoutAKey(t *testing.T) {
	c := config.Default()
	c.Store.Backend, c.Store.RedisURL = "redis", "redis://127.0.0.1:1"
	c.Checkpoints.Enabled = false
	_, err := newReplicas(context.Background(), c, nil, nil, zap.NewNop())
	if err == nil || !strings.Contains(err.Error(), "cluster.secret") || !strings.Contains(err.Error(), "no cluster key") {
		t.Fatalf("starting a cluster without a key: %v, want a clear error naming cluster.secret", err)
	}
}

func TestResolvePaths(t *testing.T) {
	cache := t.TempDir()
	root := filepath.Join(cache, "codeinterp")
	mk := func(name string, complete bool, age time.Duration) string {
		d := filepath.Join(root, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "python.wasm"), []byte("\x00asm"), 0o644); err != nil {
			t.Fatal(err)
		}
		if complete {
			m := filepath.Join(d, "MANIFEST")
			if err := os.WriteFile(m, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			at := time.Now().Add(-age)
			if err := os.Chtimes(m, at, at); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	older := mk("cpython-3.13.5-aaaaaaaaaaaa", true, 2*time.Hour)
	newer := mk("cpython-3.13.5-bbbbbbbbbbbb", true, time.Hour)
	mk("cpython-3.13.5-cccccccccccc", false, 0) // still building
	mk("cpython-3.12.0-dddddddddddd", true, 0)  // another version
	explicit := mk("elsewhere", true, 0)
	home := t.TempDir()
	root = filepath.Join(home, ".cache", "codeinterp")
	homeRuntime := mk("cpython-3.13.5-eeeeeeeeeeee", true, 0)
	root = filepath.Join(cache, "codeinterp")

	env := func(kv ...string) func(string) (string, bool) {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	tests := []struct {
		name              string
		runtime, cacheDir string
		env               func(string) (string, bool)
		wantRuntime       string
		wantCache         string
		wantErr           error
	}{
		{"newest complete under XDG", "", "", env("XDG_CACHE_HOME", cache, "HOME", "/nonexistent"), newer, filepath.Join(root, "wazero"), nil},
		{"HOME/.cache fallback", "", "", env("HOME", home), homeRuntime, filepath.Join(home, ".cache", "codeinterp", "wazero"), nil},
		{"empty XDG falls back to HOME", "", "", env("XDG_CACHE_HOME", "", "HOME", home), homeRuntime, filepath.Join(home, ".cache", "codeinterp", "wazero"), nil},
		{"build script variable", "", "", env("XDG_CACHE_HOME", cache, "CODEINTERP_RUNTIME_DIR", older), older, filepath.Join(root, "wazero"), nil},
		{"explicit wins", explicit, "/c", env("CODEINTERP_RUNTIME_DIR", older), explicit, "/c", nil},
		{"explicit without python.wasm", root, "/c", env(), "", "", errNoRuntime},
		{"nothing built", "", "", env("XDG_CACHE_HOME", t.TempDir()), "", "", errNoRuntime},
		{"no home at all", "", "", env(), "", "", errNoRuntime},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := config.Default()
			c.Sandbox.RuntimeDir, c.Sandbox.CacheDir = tt.runtime, tt.cacheDir
			err := resolvePaths(c, tt.env)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Sandbox.RuntimeDir != tt.wantRuntime || c.Sandbox.CacheDir != tt.wantCache {
				t.Errorf("got %q, %q; want %q, %q", c.Sandbox.RuntimeDir, c.Sandbox.CacheDir, tt.wantRuntime, tt.wantCache)
			}
		})
	}
}

// TestWASMConfig: the sandbox defaults and the WASM provider's own must not
// drift apart, and the mapping gives a config the provider accepts.
func TestWASMConfig(t *testing.T) {
	c := config.Default()
	c.Sandbox.RuntimeDir = "/rt"
	c.Sandbox.CacheDir = "/cache"
	got := wasmConfig(c, []string{"/bin/extproc", "__sandbox-worker"})
	want := wasm.DefaultConfig()
	want.RuntimeDir, want.CacheDir = "/rt", "/cache"
	want.WorkerCommand = []string{"/bin/extproc", "__sandbox-worker"}
	// The checkpoint bound is the checkpoints section's, not a sandbox
	// default: with checkpoints on (the default) it is checkpoints.max_bytes.
	want.Limits.CheckpointBytes = int64(c.Checkpoints.MaxBytes)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("wasmConfig(Default()) =\n%+v\nwant wasm.DefaultConfig()\n%+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestCheckOptions: the settings whose meaning a package owns are
// validated by that package's own Validate, reported at their YAML paths
// together with config's own problems, in one error.
func TestCheckOptions(t *testing.T) {
	key := base64.StdEncoding.EncodeToString(make([]byte, 16))
	tests := []struct {
		name   string
		mutate func(*config.Config)
		want   [][2]string
	}{
		{"function name", func(c *config.Config) { c.Interceptor.FunctionName = "code interpreter" }, [][2]string{{"interceptor.function_name", "1-64 characters"}}},
		{"function name empty", func(c *config.Config) { c.Interceptor.FunctionName = "" }, [][2]string{{"interceptor.function_name", "1-64 characters"}}},
		{"max rounds", func(c *config.Config) { c.Interceptor.MaxRounds = 0 }, [][2]string{{"interceptor.max_rounds", "between 1 and 100"}}},
		{"parallel", func(c *config.Config) { c.Interceptor.MaxParallelCalls = 65 }, [][2]string{{"interceptor.max_parallel_calls", "between 1 and 64"}}},
		{"tool calls", func(c *config.Config) { c.Interceptor.MaxToolCalls = 0 }, [][2]string{{"interceptor.max_tool_calls", "between 1 and 1000"}}},
		{"follow up", func(c *config.Config) { c.Interceptor.FollowUp = "stateful" }, [][2]string{{"interceptor.follow_up", "not one of auto, replay, previous_response_id"}}},
		{"memory limit small", func(c *config.Config) { c.Interceptor.MaxMemoryLimit = config.MiB }, [][2]string{{"interceptor.max_memory_limit", "at least 32MiB"}}},
		{"source bytes", func(c *config.Config) { c.Sandbox.Limits.SourceBytes = 0 }, [][2]string{{"sandbox.limits.source_bytes", "must be positive"}}},
		{"run timeout", func(c *config.Config) { c.Sandbox.Limits.RunTimeout = 0 }, [][2]string{{"sandbox.limits.run_timeout", "must be positive"}}},
		{"guest memory", func(c *config.Config) { c.Sandbox.Limits.GuestMemory = 16 * config.MiB }, [][2]string{{"sandbox.limits.guest_memory", "at least 32MiB"}}},
		{"max guest below guest", func(c *config.Config) {
			c.Sandbox.Limits.MaxGuestMemory = 128 * config.MiB
			c.Interceptor.MaxMemoryLimit = 64 * config.MiB
		}, [][2]string{{"sandbox.limits.max_guest_memory", "at least guest_memory"}}},
		{"worker overhead", func(c *config.Config) { c.Sandbox.Limits.WorkerOverhead = config.MiB }, [][2]string{{"sandbox.limits.worker_overhead", "must be at least"}}},
		{"stdout", func(c *config.Config) { c.Sandbox.Limits.StdoutBytes = 0 }, [][2]string{{"sandbox.limits.stdout_bytes", "must be positive"}}},
		{"scratch", func(c *config.Config) { c.Sandbox.Limits.ScratchBytes = -1 }, [][2]string{{"sandbox.limits.scratch_bytes", "must not be negative"}}},
		{"pids", func(c *config.Config) { c.Sandbox.Limits.Pids = 0 }, [][2]string{{"sandbox.limits.pids", "must be positive"}}},
		{"cpus", func(c *config.Config) { c.Sandbox.Limits.CPUs = 0 }, [][2]string{{"sandbox.limits.cpus", "must be positive"}}},
		{"all collected", func(c *config.Config) {
			c.Server.Listen = ""
			c.Logging.Level = "x"
			c.Sandbox.Limits.Pids = 0
		}, [][2]string{{"server.listen", "must be set"}, {"sandbox.limits.pids", "must be positive"}, {"logging.level", "not one of"}}},
		{"input files", func(c *config.Config) { c.Interceptor.InputFiles = "drop" }, [][2]string{{"interceptor.input_files", "not one of pass, note"}}},
		{"max sessions", func(c *config.Config) { c.Sandbox.MaxSessions = 0; c.Sandbox.WarmWorkers = 0 }, [][2]string{{"sandbox.max_sessions", "must be positive"}}},
		{"warm workers", func(c *config.Config) { c.Sandbox.WarmWorkers = 9 }, [][2]string{{"sandbox.warm_workers", "between 0 and max_sessions"}}},
		{"queue wait", func(c *config.Config) { c.Sandbox.QueueWait = -time.Second }, [][2]string{{"sandbox.queue_wait", "must not be negative"}}},
		{"cgroup", func(c *config.Config) { c.Sandbox.Isolation.Cgroup = "v3" }, [][2]string{{"sandbox.isolation.cgroup", "not one of auto, v1, v2, off"}}},
		{"s3 bad prefix", func(c *config.Config) {
			k := &c.Checkpoints
			k.Store, k.S3.Endpoint, k.S3.Bucket, k.S3.Prefix = "s3", "https://s3.example.com", "b", "../x"
		}, [][2]string{{"checkpoints.s3.prefix", "not a key prefix ending in /"}}},
		{"a short checkpoint key", func(c *config.Config) { c.Checkpoints.Key = key }, [][2]string{{"checkpoints.key", "16 bytes, want 32"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := config.Default()
			tt.mutate(c)
			wantFieldErrors(t, c.Collect(checkOptions), tt.want)
		})
	}
}

// TestLoadWithChecks: Load reports checkOptions' problems with its own,
// in one *config.Error naming the file.
func TestLoadWithChecks(t *testing.T) {
	file := "../../testdata/config/invalid.yaml"
	_, err := config.LoadEnv(file, nil, checkOptions)
	var le *config.Error
	if !errors.As(err, &le) || le.Source != file {
		t.Fatalf("error %v is not a *config.Error for %s", err, file)
	}
	wantFieldErrors(t, err, [][2]string{
		{"server.listen", "is not host:port"},
		{"server.override_message_timeout", "shorter than one round"},
		{"routes.paths[0]", "must start with /"},
		{"upstream.url", "absolute http:// or https://"},
		{"upstream.forward_headers[1]", "the upstream URL decides the host"},
		{"sandbox.warm_workers", "between 0 and max_sessions"},
		{"sandbox.isolation.cgroup", `"v3" is not one of`},
		{"logging.level", `"verbose" is not one of`},
	})
	if c, err := config.LoadEnv("", nil, checkOptions); err != nil || c == nil {
		t.Fatalf("the defaults: %v", err)
	}
}

// TestPoolConfig: the mapping gives a config the pool accepts, every field
// mapped, and gVisor's sentry its core.
func TestPoolConfig(t *testing.T) {
	c := config.Default()
	if err := poolConfig(c).Validate(); err != nil {
		t.Fatal(err)
	}
	c.Sandbox.Limits.CPUs = 0.5
	c.Sandbox.Isolation.UID = 7
	c.Sandbox.Limits.MaxGuestMemory = 3 * config.GiB
	p := poolConfig(c)
	if p.Limits.CPUs != 0.5 || p.Isolation.UID != 7 || p.Limits.MaxGuestMemoryBytes != 3<<30 {
		t.Errorf("fields not mapped: %+v", p)
	}
	// gVisor's cgroup quota is the code's cpus plus the sentry's core; the
	// WASM worker has no machinery beside the code.
	if p.Limits.WorkerOverheadCPUs != 0 {
		t.Errorf("wasm: WorkerOverheadCPUs %v, want 0", p.Limits.WorkerOverheadCPUs)
	}
	c.Sandbox.Provider = config.ProviderGVisor
	if p := poolConfig(c); p.Limits.WorkerOverheadCPUs != gvisor.RecommendedOverheadCPUs || p.Limits.CPUs != 0.5 {
		t.Errorf("gvisor: CPUs %v + WorkerOverheadCPUs %v, want 0.5 + %v", p.Limits.CPUs, p.Limits.WorkerOverheadCPUs, gvisor.RecommendedOverheadCPUs)
	}
	// checkpoints.max_bytes bounds both kinds' checkpoints as they are
	// written; gVisor's kind takes the pool's limits.
	c.Checkpoints.MaxBytes = 5 * config.MiB
	if p, g := poolConfig(c), gvisorConfig(c, "/extproc"); p.Limits.CheckpointBytes != 5<<20 || g.Limits.CheckpointBytes != 5<<20 {
		t.Errorf("checkpoints.max_bytes: pool %d, gvisor %d, want %d", p.Limits.CheckpointBytes, g.Limits.CheckpointBytes, 5<<20)
	}
	c.Checkpoints.Enabled = false
	if p := poolConfig(c); p.Limits.CheckpointBytes != 0 {
		t.Errorf("checkpoints off: CheckpointBytes %d, want 0", p.Limits.CheckpointBytes)
	}
}

// TestStoreLimitsAgreeWithTheSandbox: the store never accepts what a
// session cannot hold — a container's files are copied whole into each of
// its interpreters — and says which of the bounds the operator set it
// lowered. The defaults are what a session holds: nothing to warn of.
func TestStoreLimitsAgreeWithTheSandbox(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		edit                    func(*config.Config)
		file, container, upload config.ByteSize
		lowered                 int
	}{
		{"defaults: 32MiB of scratch for 256 files", nil, 31 * config.MiB, 31 * config.MiB, 31 * config.MiB, 0},
		{"set above what a session holds", func(c *config.Config) {
			c.Store.Limits.FileBytes, c.Store.Limits.ContainerBytes, c.API.MaxUploadBytes = 64*config.MiB, 256*config.MiB, 64*config.MiB
		}, 31 * config.MiB, 31 * config.MiB, 31 * config.MiB, 3},
		{"scratch that holds the store's bounds", func(c *config.Config) {
			c.Sandbox.Limits.ScratchBytes = 512 * config.MiB
			c.Store.Limits.FileBytes, c.Store.Limits.ContainerBytes, c.API.MaxUploadBytes = 16*config.MiB, 256*config.MiB, 16*config.MiB
		}, 16 * config.MiB, 256 * config.MiB, 16 * config.MiB, 0},
		{"one file is at most a frame's 32MiB", func(c *config.Config) { c.Sandbox.Limits.ScratchBytes = 2 * config.GiB },
			32 * config.MiB, 2*config.GiB - config.MiB, 32 * config.MiB, 0},
		{"fewer files leave more room", func(c *config.Config) {
			c.Store.Limits.ContainerFiles = 16
			c.Store.Limits.FileBytes, c.API.MaxUploadBytes = 8*config.MiB, 8*config.MiB
		}, 8 * config.MiB, 32*config.MiB - 64*config.KiB, 8 * config.MiB, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config.Default()
			if tc.edit != nil {
				tc.edit(c)
			}
			if err := c.Collect(checkOptions); err != nil {
				t.Fatal(err)
			}
			l := storeLimits(c)
			if l.FileBytes != int64(tc.file) || l.ContainerBytes != int64(tc.container) || maxUploadBytes(c) != int64(tc.upload) {
				t.Errorf("file %d, container %d, upload %d; want %d, %d, %d", l.FileBytes, l.ContainerBytes, maxUploadBytes(c), tc.file, tc.container, tc.upload)
			}
			if l.ContainerFiles != c.Store.Limits.ContainerFiles || l.OwnerBytes != int64(c.Store.Limits.OwnerBytes) {
				t.Errorf("the other bounds changed: %+v", l)
			}
			if got := loweredLimits(c); len(got) != tc.lowered {
				t.Errorf("loweredLimits() = %q, want %d lines", got, tc.lowered)
			}
		})
	}
}

// TestRestoreExpiredLimits: containers.restore_expired keeps an expired
// container's files checkpoints.ttl for the store, and the store remembers
// it as long again after; off, nothing is kept (OpenAI's behaviour).
func TestRestoreExpiredLimits(t *testing.T) {
	c := config.Default()
	if l := storeLimits(c); l.ExpiredKeep != 0 || l.ExpiredMemory != c.Store.Limits.ExpiredMemory {
		t.Fatalf("default: keep %s, memory %s; want nothing kept", l.ExpiredKeep, l.ExpiredMemory)
	}
	c.Containers.RestoreExpired = true
	c.Checkpoints.TTL = 7 * 24 * time.Hour
	l := storeLimits(c)
	if l.ExpiredKeep != 7*24*time.Hour || l.ExpiredMemory != 7*24*time.Hour+c.Store.Limits.ExpiredMemory {
		t.Fatalf("restore_expired: keep %s, memory %s", l.ExpiredKeep, l.ExpiredMemory)
	}
}

// TestDefaultsAgree: the server's defaults are written in config; where a
// package also has a fallback for a zero field (for its own callers and
// tests), the two must be the same value.
func TestDefaultsAgree(t *testing.T) {
	c := config.Default()
	eq := func(what string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: config gives %v, the package %v", what, got, want)
		}
	}
	f := filterConfig(c)
	eq("routes.paths", f.Paths, filter.DefaultPaths())
	eq("routes.methods", f.Methods, filter.DefaultMethods())
	eq("server.max_body_bytes", f.MaxBodyBytes, int64(filter.DefaultMaxBodyBytes))
	eq("upstream.forward_headers", f.Upstream.ForwardHeaders, filter.DefaultForwardHeaders())
	eq("api.auth_headers", c.API.AuthHeaders, store.DefaultAuthHeaders())
	ic := interceptorConfig(c)
	ic.MaxBodyBytes = 0 // the filter's bound, not the interceptor's default
	eq("interceptor", ic, interceptor.DefaultConfig())
	a := apiConfig(c)
	eq("api.default_expiry", a.DefaultExpiryMinutes, api.DefaultExpiryMinutes)
	eq("responses.max_resumed_streams", a.MaxResumedStreams, store.BackgroundReaders)
	eq("responses.max_resumed_streams_per_credential", a.MaxResumedStreamsPerOwner, api.DefaultResumedStreamsPerOwner)
	eq("responses", responseLimits(c), store.DefaultResponseLimits())
	eq("conversations", conversationLimits(c), store.DefaultConversationLimits())
	sl, dl := storeLimits(c), store.DefaultLimits()
	sl.FileBytes, sl.ContainerBytes, dl.FileBytes, dl.ContainerBytes = 0, 0, 0, 0 // derived here
	eq("store.limits", sl, dl)
	eq("sandbox.gvisor.platform", c.Sandbox.GVisor.Platform, gvisor.DefaultPlatform)
	eq("sandbox.gvisor.platform values", config.GVisorPlatforms, gvisor.Platforms())
	eq("gvisor guest_memory", int64(config.GVisorGuestMemory), int64(gvisor.RecommendedGuestMemoryBytes))
	eq("gvisor max_guest_memory", int64(config.GVisorMaxGuestMemory), int64(gvisor.RecommendedMaxGuestMemoryBytes))
	eq("gvisor worker_overhead", int64(config.GVisorWorkerOverhead), int64(gvisor.RecommendedOverheadBytes))
	eq("gvisor pids", config.GVisorPids, gvisor.RecommendedPids)
	eq("gvisor overhead cpus", float64(config.GVisorOverheadCPUs), float64(gvisor.RecommendedOverheadCPUs))
}

func wantFieldErrors(t *testing.T, err error, want [][2]string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want %v", want)
	}
	got := config.FieldErrors(err)
	if len(got) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(got), len(want), err)
	}
	for i, w := range want {
		if got[i].Path != w[0] || !strings.Contains(got[i].Reason, w[1]) {
			t.Errorf("error %d = %q; want path %q with reason containing %q", i, got[i].Error(), w[0], w[1])
		}
	}
}
