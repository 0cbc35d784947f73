package worker

import (
	"context"
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
)

// runtimeDirForBench finds the built runtime the way the pool does, without
// importing it (the pool's tests import this package's parent).
func runtimeDirForBench(b testing.TB) string {
	if d := os.Getenv("CODEINTERP_RUNTIME_DIR"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	dirs, _ := filepath.Glob(filepath.Join(home, ".cache", "codeinterp", "cpython-3.13.5-*", "MANIFEST"))
	if len(dirs) == 0 {
		b.Fatal("the CPython-WASI runtime is required (run `make runtime`)")
	}
	// The newest build, as the pool picks (the names are recipe hashes).
	mtime := func(f string) int64 {
		st, err := os.Stat(f)
		if err != nil {
			return 0
		}
		return st.ModTime().UnixNano()
	}
	sort.Slice(dirs, func(i, j int) bool { return mtime(dirs[i]) < mtime(dirs[j]) })
	return filepath.Dir(dirs[len(dirs)-1])
}

// BenchmarkColdStartPhases splits a worker's start-up, in-process and
// without a cgroup, into loading the compiled module from the cache and
// starting CPython until it waits for its first program. Together with the
// pool's ColdPrint25 it shows where a cold session's time goes.
func BenchmarkColdStartPhases(b *testing.B) {
	dir := runtimeDirForBench(b)
	cacheDir := b.TempDir()
	ctx := context.Background()
	if err := Precompile(ctx, dir, cacheDir); err != nil {
		b.Fatal(err)
	}
	wasm, err := os.ReadFile(filepath.Join(dir, "python.wasm"))
	if err != nil {
		b.Fatal(err)
	}
	var load, start []time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		cache, err := wazero.NewCompilationCacheWithDir(cacheDir)
		if err != nil {
			b.Fatal(err)
		}
		rt := wazero.NewRuntimeWithConfig(ctx, compilerConfig(false).
			WithCompilationCache(cache).WithMemoryLimitPages(4096))
		compiled, err := rt.CompileModule(trustCache(ctx), wasm) // as a worker loads it
		if err != nil {
			b.Fatal(err)
		}
		if _, err := instantiateWASI(ctx, rt); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		stdinR, stdinW := io.Pipe()
		ready := make(chan struct{})
		var stderr strings.Builder
		mc := wazero.NewModuleConfig().WithName("").
			WithArgs("python3.13", "-u", "-c", bootstrap).
			WithEnv("PYTHONHOME", "/usr/local").
			WithStdin(&readyReader{r: stdinR, ready: ready}).
			WithStderr(&stderr).
			WithFSConfig(guestFS(filepath.Join(dir, "lib"), newScratch(1<<20))).
			WithRandSource(rand.Reader).WithSysWalltime().WithSysNanotime().WithSysNanosleep()
		exited := make(chan error, 1)
		go func() {
			_, err := rt.InstantiateModule(experimental.WithMemoryAllocator(ctx, mmapAllocator{}), compiled, mc)
			exited <- err
		}()
		select {
		case <-ready:
		case err := <-exited:
			b.Fatalf("interpreter exited: %v: %s", err, stderr.String())
		}
		t2 := time.Now()
		load, start = append(load, t1.Sub(t0)), append(start, t2.Sub(t1))
		stdinW.Close()
		<-exited
		rt.Close(ctx)
		cache.Close(ctx)
	}
	median := func(d []time.Duration) float64 {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return float64(d[len(d)/2]) / float64(time.Millisecond)
	}
	b.ReportMetric(median(load), "ms-p50-load-compiled")
	b.ReportMetric(median(start), "ms-p50-python-start")
}

// BenchmarkRestorePhases is ColdStartPhases for a session restored from a
// snapshot (taken once, before the timed loop): loading the compiled
// snapshot module from the cache (once per worker process), restoring an
// instance (mapping the image, globals), and post_restore plus the kernel
// until it waits for its first program (per session).
func BenchmarkRestorePhases(b *testing.B) {
	dir := runtimeDirForBench(b)
	if _, err := os.Stat(filepath.Join(dir, ReactorFile)); err != nil {
		// runtimeDirForBench takes the last build by name; the reactor is
		// needed here.
		b.Fatalf("%s has no %s: set CODEINTERP_RUNTIME_DIR to a current runtime build", dir, ReactorFile)
	}
	cacheDir := b.TempDir()
	snap := filepath.Join(b.TempDir(), "snap")
	ctx := context.Background()
	if err := TakeSnapshot(ctx, dir, cacheDir, snap); err != nil {
		b.Fatal(err)
	}
	var load, restore, kernel []time.Duration
	var faults []float64
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		cache, err := wazero.NewCompilationCacheWithDir(cacheDir)
		if err != nil {
			b.Fatal(err)
		}
		rt := wazero.NewRuntimeWithConfig(ctx, compilerConfig(false).
			WithCompilationCache(cache).WithMemoryLimitPages(4096))
		r, err := openRestorer(ctx, rt, snap, 4096)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := instantiateWASI(ctx, rt); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		stdinR, stdinW := io.Pipe()
		ready := make(chan struct{})
		var stderr strings.Builder
		mc := snapshotModuleConfig(guestFS(filepath.Join(dir, "lib"), newScratch(1<<20))).
			WithStdin(&readyReader{r: stdinR, ready: ready}).WithStderr(&stderr)
		mod, err := r.restore(ctx, rt, mc, 0)
		if err != nil {
			b.Fatal(err)
		}
		f0 := minorFaults(b)
		t2 := time.Now()
		exited := make(chan error, 1)
		go func() { exited <- execSource(ctx, mod, restoreEntry) }()
		select {
		case <-ready:
		case err := <-exited:
			b.Fatalf("interpreter exited: %v: %s", err, stderr.String())
		}
		t3 := time.Now()
		faults = append(faults, float64(minorFaults(b)-f0))
		load, restore, kernel = append(load, t1.Sub(t0)), append(restore, t2.Sub(t1)), append(kernel, t3.Sub(t2))
		stdinW.Close()
		<-exited
		rt.Close(ctx)
		cache.Close(ctx)
		r.close()
	}
	median := func(d []time.Duration) float64 {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return float64(d[len(d)/2]) / float64(time.Millisecond)
	}
	b.ReportMetric(median(load), "ms-p50-load-compiled")
	b.ReportMetric(median(restore), "ms-p50-restore")
	b.ReportMetric(median(kernel), "ms-p50-post-restore-to-ready")
	sort.Float64s(faults)
	b.ReportMetric(faults[len(faults)/2], "page-faults-p50-post-restore-to-ready")
}

// minorFaults is the process's minor page faults so far: in a restored
// session, mostly the copy-on-write of the image's pages it writes.
func minorFaults(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Minflt
}
