package worker

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"golang.org/x/sys/unix"

	"github.com/codeinterp/codeinterp/internal/sandbox/internal/wasmbin"
)

//go:embed snapshot_init.py
var snapshotInit string

//go:embed post_restore.py
var postRestore string

// Files of a snapshot directory. A snapshot is self-contained: the module
// it was taken from (data segments stripped), its memory and its globals.
const (
	ReactorFile        = "python-reactor.wasm" // in the runtime directory
	SnapshotModuleFile = "module.wasm"
	SnapshotImageFile  = "memory.img"
	SnapshotMetaFile   = "snapshot.json"
)

// SnapshotMeta describes a snapshot image.
type SnapshotMeta struct {
	// Pages is the linear memory's size in wasm pages; the image holds
	// exactly Pages*64KiB bytes.
	Pages uint32 `json:"pages"`
	// Globals are the exported mutable globals' values (raw bits).
	Globals map[string]uint64 `json:"globals"`
	// MonotonicNanos is the host's CLOCK_MONOTONIC when the snapshot was
	// taken: the guest's monotonic clock never reads less after restore.
	MonotonicNanos int64 `json:"monotonic_ns"`
	// Packages are the package set's import names that imported.
	Packages []string `json:"packages"`
	// Module is the sha256 of module.wasm.
	Module  string    `json:"module"`
	Created time.Time `json:"created"`
}

// ReadSnapshotMeta reads dir's snapshot.json.
func ReadSnapshotMeta(dir string) (*SnapshotMeta, error) {
	b, err := os.ReadFile(filepath.Join(dir, SnapshotMetaFile))
	if err != nil {
		return nil, err
	}
	var m SnapshotMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", dir, err)
	}
	return &m, nil
}

// hostMonotonic is the host's system-wide monotonic clock: the same in
// every process of one boot, so a guest's clock stays continuous across
// the snapshot process and every worker that restores it.
func hostMonotonic() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// TakeSnapshot is the trusted step: it instantiates the reactor, starts
// CPython, runs snapshot_init.py (stdlib modules and the package set) and
// writes the stripped module, the memory image and the metadata into
// outDir (which must not exist). It runs no user code, draws the hash
// seed and every other start-up secret from crypto/rand, and compiles
// the stripped module into the cache at cacheDir so workers only load it.
func TakeSnapshot(ctx context.Context, runtimeDir, cacheDir, outDir string) (err error) {
	reactor, err := os.ReadFile(filepath.Join(runtimeDir, ReactorFile))
	if err != nil {
		return fmt.Errorf("read %s (rebuild the runtime: make runtime): %w", ReactorFile, err)
	}
	globals, err := wasmbin.Globals(reactor)
	if err != nil {
		return err
	}
	var exported []string
	for _, g := range globals {
		// A mutable global the host cannot reach could not be restored:
		// refuse rather than resume with a wrong value.
		if g.Mutable && (g.Imported || g.Export == "") {
			return fmt.Errorf("%s: mutable global %d is not exported; a snapshot could not restore it", ReactorFile, g.Index)
		}
		if g.Mutable {
			exported = append(exported, g.Export)
		}
	}
	stripped, err := wasmbin.StripData(reactor)
	if err != nil {
		return err
	}
	if err := os.Mkdir(outDir, 0o700); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(outDir)
		}
	}()

	var cache wazero.CompilationCache
	if cacheDir != "" {
		if cache, err = wazero.NewCompilationCacheWithDir(cacheDir); err != nil {
			return fmt.Errorf("compilation cache: %w", err)
		}
		defer cache.Close(ctx)
	}
	runtime := func(interruptible bool) wazero.Runtime {
		rc := compilerConfig(interruptible).WithMemoryLimitPages(65536)
		if cache != nil {
			rc = rc.WithCompilationCache(cache)
		}
		return wazero.NewRuntimeWithConfig(ctx, rc)
	}
	// What sessions will load, in both variants (wire.Init.Interruptible):
	// compile it now, in the trusted step, so the cache holds it.
	plain := runtime(false)
	_, err = plain.CompileModule(ctx, stripped)
	_ = plain.Close(ctx)
	if err != nil {
		return fmt.Errorf("compile the stripped module: %w", err)
	}
	// This step's own runtime is interruptible: its context's deadline
	// bounds it.
	rt := runtime(true)
	defer rt.Close(ctx)
	if _, err := rt.CompileModule(ctx, stripped); err != nil {
		return fmt.Errorf("compile the stripped module: %w", err)
	}
	compiled, err := rt.CompileModule(ctx, reactor)
	if err != nil {
		return fmt.Errorf("compile %s: %w", ReactorFile, err)
	}
	if _, err := instantiateWASI(ctx, rt); err != nil {
		return err
	}
	var stdout, stderr bytes.Buffer
	mc := snapshotModuleConfig(guestFS(filepath.Join(runtimeDir, "lib"), newScratch(0))).
		WithStartFunctions("_initialize").
		WithStdin(bytes.NewReader(nil)).
		WithStdout(&stdout).
		WithStderr(&stderr).
		WithNanotime(hostMonotonic, 1)
	mod, err := rt.InstantiateModule(experimental.WithMemoryAllocator(ctx, mmapAllocator{}), compiled, mc)
	if err != nil {
		return fmt.Errorf("instantiate the reactor: %w: %s", err, stderr.Bytes())
	}
	if err := callInit(ctx, mod); err != nil {
		return fmt.Errorf("%w: %s", err, stderr.Bytes())
	}
	if err := execSource(ctx, mod, snapshotInit); err != nil {
		return fmt.Errorf("snapshot_init.py: %w: %s", err, stderr.Bytes())
	}
	// The kernel's definitions, compiled once here: a restored session
	// only calls it (restoreEntry).
	kernel, ok := strings.CutSuffix(strings.TrimRight(bootstrap, "\n"), "\n"+kernelCall)
	if !ok {
		return errors.New("bootstrap.py does not end with " + kernelCall)
	}
	if err := execSource(ctx, mod, kernel+"\n"); err != nil {
		return fmt.Errorf("bootstrap.py definitions: %w: %s", err, stderr.Bytes())
	}
	if err := execSource(ctx, mod, snapshotFinish); err != nil {
		return fmt.Errorf("snapshot finish: %w: %s", err, stderr.Bytes())
	}
	meta := &SnapshotMeta{Globals: map[string]uint64{}, Created: time.Now().UTC()}
	_, after, ok := bytes.Cut(stdout.Bytes(), []byte("\x00CI-SNAPSHOT:"))
	if !ok || json.Unmarshal(bytes.TrimSpace(after), &meta.Packages) != nil {
		return fmt.Errorf("snapshot_init.py did not report its packages: %q %s", stdout.Bytes(), stderr.Bytes())
	}
	meta.MonotonicNanos = hostMonotonic()
	for _, name := range exported {
		g := mod.ExportedGlobal(name)
		if g == nil {
			return fmt.Errorf("global %q is not exported", name)
		}
		meta.Globals[name] = g.Get()
	}
	mem := mod.Memory()
	img, ok := mem.Read(0, mem.Size())
	if !ok {
		return errors.New("read linear memory")
	}
	meta.Pages = mem.Size() / wasmPageSize
	sum := sha256.Sum256(stripped)
	meta.Module = hex.EncodeToString(sum[:])
	if err := os.WriteFile(filepath.Join(outDir, SnapshotModuleFile), stripped, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(outDir, SnapshotImageFile), img, 0o600); err != nil {
		return err
	}
	mb, _ := json.MarshalIndent(meta, "", "  ")
	// The metadata is written last: its presence marks a whole snapshot.
	return os.WriteFile(filepath.Join(outDir, SnapshotMetaFile), mb, 0o600)
}

// SnapshotRecipe identifies what TakeSnapshot bakes into an image besides
// the runtime (the init program, the kernel's definitions, the format): a
// snapshot is only reused by code with the same recipe.
func SnapshotRecipe() string {
	h := sha256.New()
	h.Write([]byte("codeinterp-snapshot-v1\x00"))
	h.Write([]byte(snapshotInit))
	h.Write([]byte{0})
	h.Write([]byte(bootstrap))
	h.Write([]byte{0})
	h.Write([]byte(snapshotFinish))
	return hex.EncodeToString(h.Sum(nil))
}

// kernelCall is bootstrap.py's last line, which runs the kernel loop.
const kernelCall = "_codeinterp_loop()"

// snapshotFinish is the snapshot step's last program, after the kernel's
// definitions: what every session would otherwise pay again is done once,
// in the image. post_restore.py is compiled here (compiling its source took
// half of a session's start), the kernel's first-use costs are taken, and
// what that made joins the frozen generation.
var snapshotFinish = "_codeinterp_post_restore = compile(" + pythonString(postRestore) + ", '<post_restore>', 'exec')\n" +
	"_codeinterp_warmup()\n" +
	"import gc as _gc\n_gc.collect()\n_gc.freeze()\ndel _gc\n"

// restoreEntry is what a restored session runs: post_restore.py (compiled
// in the snapshot), then the kernel the snapshot defined, already warm.
const restoreEntry = "exec(_codeinterp_post_restore)\n_codeinterp_loop()\n"

// pythonString is s as a Python string literal: a JSON string is one.
func pythonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// snapshotModuleConfig is what the snapshot step and every restored session
// share: the same mounts in the same order (wasi-libc keeps the preopen
// table in linear memory), no args, no environment.
func snapshotModuleConfig(fs wazero.FSConfig) wazero.ModuleConfig {
	return wazero.NewModuleConfig().
		WithName("").
		WithFSConfig(fs).
		WithRandSource(rand.Reader).
		WithSysWalltime().
		WithSysNanosleep()
}

func callInit(ctx context.Context, mod api.Module) error {
	f := mod.ExportedFunction("ci_init")
	if f == nil {
		return errors.New("the reactor has no ci_init")
	}
	res, err := f.Call(ctx)
	if err != nil {
		return fmt.Errorf("ci_init: %w", err)
	}
	if res[0] != 0 {
		return fmt.Errorf("ci_init returned %d", int32(res[0]))
	}
	return nil
}

// execSource runs Python source through ci_buffer/ci_exec.
func execSource(ctx context.Context, mod api.Module, src string) error {
	buf, size := mod.ExportedFunction("ci_buffer"), mod.ExportedFunction("ci_buffer_size")
	exec := mod.ExportedFunction("ci_exec")
	if buf == nil || size == nil || exec == nil {
		return errors.New("the reactor lacks ci_buffer/ci_buffer_size/ci_exec")
	}
	r, err := buf.Call(ctx)
	if err != nil {
		return err
	}
	n, err := size.Call(ctx)
	if err != nil {
		return err
	}
	if uint64(len(src)) > n[0] || strings.IndexByte(src, 0) >= 0 {
		return fmt.Errorf("source of %d bytes does not fit the %d-byte buffer", len(src), n[0])
	}
	if !mod.Memory().WriteString(uint32(r[0]), src) {
		return errors.New("ci_buffer is outside memory")
	}
	res, err := exec.Call(ctx, uint64(len(src)))
	if err != nil {
		return err
	}
	if res[0] != 0 {
		return fmt.Errorf("ci_exec returned %d", int32(res[0]))
	}
	return nil
}
