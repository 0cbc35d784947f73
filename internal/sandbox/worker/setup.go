package worker

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
	"golang.org/x/sys/unix"

	"github.com/codeinterp/codeinterp/internal/sandbox/internal/wire"
)

// Precompile compiles python.wasm into the compilation cache at cacheDir so
// that workers only ever load it. It executes no guest code.
func Precompile(ctx context.Context, runtimeDir, cacheDir string) error {
	wasm, err := os.ReadFile(filepath.Join(runtimeDir, "python.wasm"))
	if err != nil {
		return err
	}
	cache, err := wazero.NewCompilationCacheWithDir(cacheDir)
	if err != nil {
		return fmt.Errorf("compilation cache: %w", err)
	}
	defer cache.Close(ctx)
	rt := wazero.NewRuntimeWithConfig(ctx, compilerConfig(false).WithCompilationCache(cache))
	defer rt.Close(ctx)
	if _, err := rt.CompileModule(ctx, wasm); err != nil {
		return fmt.Errorf("compile python.wasm: %w", err)
	}
	return nil
}

// trustCache lets a worker's CompileModule skip validating function bodies
// whose compiled code is in the cache (validated when it was compiled):
// two thirds of loading a module into a new process. The cache is written
// only by the trusted precompile and snapshot steps, into a directory the
// workers read before they drop privileges, and a cache entry is native
// code run as is, so validating the wasm again would guard nothing.
func trustCache(ctx context.Context) context.Context {
	return experimental.WithCompilationCacheTrusted(ctx)
}

// trustCacheWithSum is trustCache for a binary whose SHA-256 (hex) the
// trusted step that wrote it recorded beside it: a snapshot's module and
// SnapshotMeta.Module. The cached code is then keyed by that sum instead
// of a hash of the binary, which was half of loading the snapshot module
// in every worker (4 ms of CPU; docs/benchmark-notes.md, issue 41). The
// sum is trusted on a hit as the cache is, and comes from the same
// writer (a base fetched from Bases carries the sum of this server's own
// module, which the server hashed and compared before writing the base's
// directory: wasm's checkModule); on a miss wazero hashes the binary and
// refuses a wrong sum before compiling anything. A missing or malformed
// sum (a snapshot from before the field) falls back to hashing.
func trustCacheWithSum(ctx context.Context, hexSum string) context.Context {
	var sum [sha256.Size]byte
	if len(hexSum) != hex.EncodedLen(len(sum)) {
		return trustCache(ctx)
	}
	if _, err := hex.Decode(sum[:], []byte(hexSum)); err != nil {
		return trustCache(ctx)
	}
	return experimental.WithCompilationCacheTrustedSHA256(ctx, sum)
}

// compilerConfig is the runtime configuration of everything that compiles
// or loads a module; interruptible is wire.Init.Interruptible. It must be
// the same in the trusted step that fills the cache and in workers:
// wazero's cache key covers the binary and whether the code checks for
// context cancellation (WithCloseOnContextDone), so a mismatch makes every
// worker miss the cache and compile (seconds) itself. The trusted steps
// compile what workers load in both variants. The checks are a load and a
// branch at every call and loop header of the guest: CPython ran half as
// fast with them (sum(range(1000)) 138 µs against 71, compile() of a line
// 70 µs against 38), so only workers that may need to stop a guest in
// the process have them.
func compilerConfig(interruptible bool) wazero.RuntimeConfig {
	return wazero.NewRuntimeConfigCompiler().WithCloseOnContextDone(interruptible)
}

// hardenEarly applies what needs no configuration, before anything is read
// from the server.
func hardenEarly() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{}); err != nil {
		return fmt.Errorf("rlimit core: %w", err)
	}
	return nil
}

// dropPrivileges switches to cred and re-arms what a credential change
// clears. After it, other processes of the same uid cannot ptrace us.
func dropPrivileges(cred *wire.Credential, parentPID int) error {
	if cred != nil {
		if err := syscall.Setgroups(nil); err != nil {
			return fmt.Errorf("setgroups: %w", err)
		}
		if err := syscall.Setgid(int(cred.GID)); err != nil {
			return fmt.Errorf("setgid: %w", err)
		}
		if err := syscall.Setuid(int(cred.UID)); err != nil {
			return fmt.Errorf("setuid: %w", err)
		}
		if os.Getuid() != int(cred.UID) || os.Geteuid() != int(cred.UID) || os.Getgid() != int(cred.GID) {
			return errors.New("credentials did not change")
		}
		if err := syscall.Setuid(0); err == nil {
			return errors.New("could regain root after dropping it")
		}
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("dumpable: %w", err)
	}
	// A credential change clears the parent-death signal.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("pdeathsig: %w", err)
	}
	if parentPID != 0 && os.Getppid() != parentPID {
		return errors.New("server exited before the worker was ready")
	}
	return nil
}
