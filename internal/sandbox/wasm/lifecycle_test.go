package wasm_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/cgroup"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/internal/sandbox/wasm"
)

// TestWorkersDieWithServer kills a server process with SIGKILL (no cleanup
// code runs) and checks that its workers, warm and busy, go with it.
func TestWorkersDieWithServer(t *testing.T) {
	cfg := sandboxtest.Config(t)
	cfg.WarmWorkers = 1
	raw, _ := json.Marshal(cfg)
	self, _ := os.Executable()
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), orphanParentEnv+"=1", orphanParentEnv+"_CONFIG="+string(raw))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("server did not report its workers: %v; stderr: %s", err, stderr.String())
	}
	var pids []int
	if err := json.Unmarshal([]byte(line), &pids); err != nil || len(pids) < 2 {
		t.Fatalf("worker pids %q: %v (want a busy and a warm worker)", line, err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err != nil {
			t.Fatalf("worker %d not alive before the server dies: %v", pid, err)
		}
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	// Liveness bound, not a speed check: the parent-death signal is
	// immediate; 20 s only keeps a failure from hanging the suite.
	deadline := time.Now().Add(20 * time.Second)
	for _, pid := range pids {
		for syscall.Kill(pid, 0) == nil {
			if time.Now().After(deadline) {
				t.Fatalf("worker %d outlived its server", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestIsolationFailsClosed: a cgroup mode the host cannot provide stops
// start-up; "off" starts but warns.
func TestIsolationFailsClosed(t *testing.T) {
	cfg := sandboxtest.Config(t)
	cfg.WarmWorkers = 0
	cfg.Isolation.Cgroup = "v2"
	_, v2err := cgroup.Open("v2", cfg.Isolation.CgroupParent)
	p, err := wasm.New(context.Background(), cfg, zap.NewNop())
	switch {
	case v2err != nil && err == nil:
		p.Close()
		t.Fatalf("pool started with cgroup v2 on a host where v2 is unusable (%v)", v2err)
	case v2err != nil && !errors.Is(err, cgroup.ErrUnavailable):
		t.Fatalf("start-up error does not say cgroups are unavailable: %v", err)
	case v2err == nil && err != nil:
		t.Fatalf("v2 is usable here but the pool failed: %v", err)
	case err == nil:
		p.Close()
	}

	core, logs := observer.New(zapcore.WarnLevel)
	cfg.Isolation.Cgroup = "off"
	p, err = wasm.New(context.Background(), cfg, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if logs.FilterMessageSnippet("isolation is OFF").Len() != 1 {
		t.Fatalf("no warning for isolation off; logs: %v", logs.All())
	}
}

// TestMissingRuntimeIsAClearError: start-up says which command builds it.
func TestMissingRuntimeIsAClearError(t *testing.T) {
	cfg := sandboxtest.Config(t)
	cfg.RuntimeDir = t.TempDir()
	_, err := wasm.New(context.Background(), cfg, zap.NewNop())
	if !errors.Is(err, wasm.ErrRuntimeMissing) || !strings.Contains(err.Error(), "make runtime") {
		t.Fatalf("error %v; want ErrRuntimeMissing naming `make runtime`", err)
	}
}

// TestCloseOrder: sessions closed after their pool (and the pool closed
// twice) neither panic nor leave workers behind; a closed pool refuses work.
func TestCloseOrder(t *testing.T) {
	cfg := sandboxtest.Config(t)
	p, err := wasm.New(context.Background(), cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	a, err := p.Open(context.Background(), sandbox.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pids := p.WorkerPIDs()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Run(context.Background(), "1"); !errors.Is(err, sandbox.ErrClosed) {
		t.Fatalf("run on a closed session: %v", err)
	}
	if _, err := p.Open(context.Background(), sandbox.SessionOptions{}); !errors.Is(err, sandbox.ErrClosed) {
		t.Fatalf("open on a closed pool: %v", err)
	}
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("worker %d outlived Close", pid)
		}
	}
}
