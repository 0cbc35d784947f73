package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"golang.org/x/sys/unix"
)

// Hand-assembled modules: (func (export "f") (result i32) i32.const 42),
// and the same function with an empty body, which leaves no result and
// must fail validation.
var (
	wasmHeader  = []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}
	wasmSigs    = []byte{0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7f, 0x03, 0x02, 0x01, 0x00, 0x07, 0x05, 0x01, 0x01, 'f', 0x00, 0x00}
	validWasm   = concat(wasmHeader, wasmSigs, []byte{0x0a, 0x06, 0x01, 0x04, 0x00, 0x41, 0x2a, 0x0b})
	invalidWasm = concat(wasmHeader, wasmSigs, []byte{0x0a, 0x04, 0x01, 0x02, 0x00, 0x0b})
)

func concat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// loadWith compiles bin in a fresh runtime over cacheDir, the way a
// worker loads its module (trusted cache), and calls f if it compiled.
func loadWith(t *testing.T, cacheDir string, bin []byte) (uint64, error) {
	t.Helper()
	return loadTrusting(t, cacheDir, bin, trustCache)
}

// loadTrusting is loadWith with the trusted context made by trust.
func loadTrusting(t *testing.T, cacheDir string, bin []byte, trust func(context.Context) context.Context) (uint64, error) {
	t.Helper()
	ctx := context.Background()
	cache, err := wazero.NewCompilationCacheWithDir(cacheDir)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close(ctx)
	rt := wazero.NewRuntimeWithConfig(ctx, compilerConfig(false).WithCompilationCache(cache))
	defer rt.Close(ctx)
	compiled, err := rt.CompileModule(trust(ctx), bin)
	if err != nil {
		return 0, err
	}
	mod, err := rt.InstantiateModule(ctx, compiled, wazero.NewModuleConfig())
	if err != nil {
		t.Fatal(err)
	}
	res, err := mod.ExportedFunction("f").Call(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return res[0], nil
}

// A trusted cache skips validating function bodies only for code that is
// already compiled: a module the cache does not hold is validated before
// it is compiled, and an invalid one is refused and never cached.
func TestTrustedCacheValidatesWhatItCompiles(t *testing.T) {
	dir := t.TempDir()
	if _, err := loadWith(t, dir, invalidWasm); err == nil || !strings.Contains(err.Error(), "invalid function") {
		t.Fatalf("invalid module compiled with a trusted, empty cache: %v", err)
	}
	// And again: the failed compile left nothing to trust.
	if _, err := loadWith(t, dir, invalidWasm); err == nil {
		t.Fatal("invalid module compiled on the second try")
	}
	for i := range 2 { // compiled, then loaded from the cache
		got, err := loadWith(t, dir, validWasm)
		if err != nil || got != 42 {
			t.Fatalf("load %d: f() = %d, %v; want 42", i, got, err)
		}
	}
}

// A snapshot's module is keyed by the hash recorded beside it (wazero
// patch 0007), trusted only for code already cached: on a miss a wrong
// hash is refused before anything is compiled, an invalid module is still
// refused with its own hash, and neither leaves an entry; a missing or
// malformed hash falls back to hashing the module.
func TestTrustedCacheWithRecordedHash(t *testing.T) {
	hexSum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	with := func(sum string) func(context.Context) context.Context {
		return func(ctx context.Context) context.Context { return trustCacheWithSum(ctx, sum) }
	}
	for _, tc := range []struct {
		name    string
		bin     []byte
		sum     string
		wantErr string // "" loads, twice (compiled, then from the cache)
	}{
		{"its own hash", validWasm, hexSum(validWasm), ""},
		{"another module's hash", validWasm, hexSum(invalidWasm), "does not match the SHA-256"},
		{"invalid module, its own hash", invalidWasm, hexSum(invalidWasm), "invalid function"},
		{"no hash recorded", validWasm, "", ""},
		{"malformed hash", validWasm, "zz" + hexSum(validWasm)[2:], ""},
		{"hash too long", validWasm, hexSum(validWasm) + "00", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for i := range 2 {
				got, err := loadTrusting(t, dir, tc.bin, with(tc.sum))
				if tc.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
						t.Fatalf("load %d: %v, want %q", i, err, tc.wantErr)
					}
					continue
				}
				if err != nil || got != 42 {
					t.Fatalf("load %d: f() = %d, %v; want 42", i, got, err)
				}
			}
			entries, _ := filepath.Glob(filepath.Join(dir, "*", "*"))
			if want := map[bool]int{true: 0, false: 1}[tc.wantErr != ""]; len(entries) != want {
				t.Fatalf("cache entries %v, want %d", entries, want)
			}
		})
	}
	// The same entry with the hash and without: workers find what the
	// trusted steps (which hash the module themselves) compiled.
	dir := t.TempDir()
	if _, err := loadWith(t, dir, validWasm); err != nil {
		t.Fatal(err)
	}
	before, _ := filepath.Glob(filepath.Join(dir, "*", "*"))
	if _, err := loadTrusting(t, dir, validWasm, with(hexSum(validWasm))); err != nil {
		t.Fatal(err)
	}
	after, _ := filepath.Glob(filepath.Join(dir, "*", "*"))
	if len(before) != 1 || !slices.Equal(before, after) {
		t.Fatalf("entries without the hash %v, with it %v: want one, the same", before, after)
	}
}

// The patched cache maps compiled code from the entry's file; where the
// cache sits on a noexec mount (a common emptyDir or /tmp), mapping it
// executable is refused and the code must be read instead, not fail.
func TestCacheOnNoexecMountIsRead(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts a noexec tmpfs and needs root (CI runs as root)")
	}
	src := t.TempDir()
	if got, err := loadWith(t, src, validWasm); err != nil || got != 42 {
		t.Fatalf("fill the cache: f() = %d, %v", got, err)
	}
	mnt := t.TempDir()
	if err := unix.Mount("tmpfs", mnt, "tmpfs", unix.MS_NOEXEC|unix.MS_NOSUID|unix.MS_NODEV, "size=16m"); err != nil {
		t.Fatalf("mount a noexec tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	if err := os.CopyFS(mnt, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	// The copy must be what is loaded: no compile on a miss.
	entries, _ := filepath.Glob(filepath.Join(mnt, "*", "*"))
	if len(entries) != 1 {
		t.Fatalf("cache entries on the noexec mount: %v", entries)
	}
	before, _ := os.Stat(entries[0])
	if got, err := loadWith(t, mnt, validWasm); err != nil || got != 42 {
		t.Fatalf("load from the noexec cache: f() = %d, %v", got, err)
	}
	after, err := os.Stat(entries[0])
	if err != nil || !os.SameFile(before, after) {
		t.Fatalf("the cache entry was replaced (a miss, not a load): %v", err)
	}
}

// Workers skip the checksum of the cache entries they load; the server's
// precompile at every start loads the same entries without trust, so a
// corrupted entry is caught there, before any worker runs its code.
func TestCorruptCacheEntryCaughtAtServerStart(t *testing.T) {
	dir := runtimeDirForBench(t) // named for benches; any test may use it
	cacheDir := t.TempDir()
	ctx := context.Background()
	if err := Precompile(ctx, dir, cacheDir); err != nil {
		t.Fatal(err)
	}
	entries, _ := filepath.Glob(filepath.Join(cacheDir, "*", "*"))
	if len(entries) != 1 {
		t.Fatalf("cache entries: %v", entries)
	}
	f, err := os.OpenFile(entries[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Native code starts at a 64 KiB boundary; flip a byte well inside it.
	b := make([]byte, 1)
	const at = 1 << 20
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := Precompile(ctx, dir, cacheDir); err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Fatalf("precompile over a corrupted entry: %v, want a checksum mismatch", err)
	}
}
