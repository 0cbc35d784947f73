package main

import (
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/sandbox/worker"
)

// wasmWorkerBinary is the wasm provider's worker (cmd/wasm-worker), looked
// for beside the server's own binary.
const wasmWorkerBinary = "wasm-worker"

// wasmWorkerCommand returns the command that starts a wasm worker: the
// wasm-worker binary beside self when it was built from the same source
// as the server, else self with its hidden worker command. Both run the
// same code (sandbox/worker.Main); wasm-worker starts about 20 ms of CPU
// faster per interpreter because it does not link the server.
func wasmWorkerCommand(self string, log *zap.Logger) []string {
	sibling := filepath.Join(filepath.Dir(self), wasmWorkerBinary)
	own, ok := debug.ReadBuildInfo()
	err := errors.New("the server carries no build information")
	if ok {
		err = sameBuild(own, sibling)
	}
	if err == nil {
		err = sameFingerprint(sibling)
	}
	if err != nil {
		log.Info("wasm workers are the server itself (wasm-worker beside it starts each interpreter faster)",
			zap.String("wasm_worker", sibling), zap.String("why", err.Error()))
		return []string{self, workerCommand}
	}
	log.Info("wasm workers", zap.String("binary", sibling))
	return []string{sibling}
}

// sameBuild checks that the binary at path was built from the same source
// as own: the same module version and VCS revision (and both clean or both
// modified), the same Go, and the same version of every module it links. A
// worker of another release would speak another protocol to the server and
// read snapshots and compiled code it did not write.
func sameBuild(own *debug.BuildInfo, path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("no wasm-worker: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	other, err := buildinfo.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading the build information of %s: %w", path, err)
	}
	if other.GoVersion != own.GoVersion {
		return fmt.Errorf("%s was built with %s, the server with %s", path, other.GoVersion, own.GoVersion)
	}
	if other.Main.Path != own.Main.Path || other.Main.Version != own.Main.Version || other.Main.Sum != own.Main.Sum {
		return fmt.Errorf("%s is module %s@%s, the server %s@%s", path, other.Main.Path, other.Main.Version, own.Main.Path, own.Main.Version)
	}
	for _, key := range []string{"vcs.revision", "vcs.time", "vcs.modified"} {
		if a, b := setting(other, key), setting(own, key); a != b {
			return fmt.Errorf("%s has %s %q, the server %q", path, key, a, b)
		}
	}
	deps := make(map[string]*debug.Module, len(own.Deps))
	for _, d := range own.Deps {
		deps[d.Path] = d
	}
	for _, d := range other.Deps {
		o := deps[d.Path]
		if o == nil || moduleID(o) != moduleID(d) {
			return fmt.Errorf("%s links %s, the server %s", path, moduleID(d), moduleID(o))
		}
	}
	return nil
}

// sameFingerprint runs the worker at path in its fingerprint mode and
// compares the answer with the server's own worker.Fingerprint: the wire
// protocol and what goes into snapshots and the guest. Build information
// cannot tell two builds of a modified tree, or builds without VCS stamps
// (-buildvcs=false), apart; this can, for what must match.
func sameFingerprint(path string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "fingerprint")
	cmd.Env = []string{}
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%s fingerprint: %w", path, err)
	}
	if got, want := strings.TrimSpace(string(out)), worker.Fingerprint(); got != want {
		return fmt.Errorf("%s has worker fingerprint %s, the server %s: it was built from other source", path, got, want)
	}
	return nil
}

func setting(bi *debug.BuildInfo, key string) string {
	for _, s := range bi.Settings {
		if s.Key == key {
			return s.Value
		}
	}
	return ""
}

// moduleID names a linked module with its version, checksum and
// replacement.
func moduleID(m *debug.Module) string {
	if m == nil {
		return "nothing of that module"
	}
	id := m.Path + "@" + m.Version + " " + m.Sum
	if m.Replace != nil {
		id += " => " + moduleID(m.Replace)
	}
	return id
}
