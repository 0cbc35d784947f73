package wasm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/internal/sandbox/wasm"
)

// orphanParentEnv turns the test binary into a server that starts a pool,
// prints its workers' pids and waits to be killed (TestWorkersDieWithServer).
const orphanParentEnv = "CODEINTERP_TEST_ORPHAN_PARENT"

func TestMain(m *testing.M) {
	if os.Getenv(orphanParentEnv) == "1" {
		os.Exit(orphanParent())
	}
	sandboxtest.Main(m)
}

func orphanParent() int {
	var cfg wasm.Config
	if err := json.Unmarshal([]byte(os.Getenv(orphanParentEnv+"_CONFIG")), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	p, err := wasm.New(context.Background(), cfg, zap.NewNop())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := p.Open(context.Background(), sandbox.SessionOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := s.Run(context.Background(), "x = 1"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for p.Capacity().Warm < cfg.WarmWorkers {
		time.Sleep(10 * time.Millisecond)
	}
	_ = json.NewEncoder(os.Stdout).Encode(p.WorkerPIDs())
	select {} // until killed
}
