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

	"github.com/codeinterp/codeinterp/internal/config"
	"github.com/codeinterp/codeinterp/internal/sandbox/wasm"
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
// they share, and nothing a pod keeps alone (a key file) may feed it.
func TestClusterSecret(t *testing.T) {
	env := func(string) (string, bool) { return t.TempDir(), true }
	with := func(change func(*config.Config)) string {
		t.Helper()
		c := config.Default()
		change(c)
		s, err := clusterSecret(c, env)
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
	if s := with(func(*config.Config) {}); s != "" {
		t.Fatalf("with only a key file: %q, want none (Redis keeps one)", s)
	}
	if s := with(func(c *config.Config) { c.Checkpoints.Enabled, c.Checkpoints.Key = false, key(1) }); s != "" {
		t.Fatalf("with checkpoints off: %q, want none", s)
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
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("wasmConfig(Default()) =\n%+v\nwant wasm.DefaultConfig()\n%+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
}
