package gvisor_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/internal/sandbox/gvisor"
)

// TestPinMatchesGoMod: the version the server requires is the one
// runtime/runsc/go.mod pins, which runtime/build-runsc.sh builds and
// stamps. Moving one without the other fails here, not on a server.
func TestPinMatchesGoMod(t *testing.T) {
	b, err := os.ReadFile("../../../runtime/runsc/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	var pinned []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == "gvisor.dev/gvisor" {
			pinned = append(pinned, f[1])
		}
	}
	if len(pinned) != 1 || pinned[0] != gvisor.PinnedRunscVersion {
		t.Fatalf("runtime/runsc/go.mod requires gvisor.dev/gvisor %v; PinnedRunscVersion is %s", pinned, gvisor.PinnedRunscVersion)
	}
}

// TestPinnedRunscInUse: a kind prepared on the defaults runs the runsc
// make setup built, and that binary names the pinned version.
func TestPinnedRunscInUse(t *testing.T) {
	e := newEnv(t)
	path, version := e.kind.Runsc()
	if version != gvisor.PinnedRunscVersion {
		t.Errorf("the kind runs runsc %s, want the pinned %s", version, gvisor.PinnedRunscVersion)
	}
	want, err := gvisor.DefaultRunsc()
	if err != nil {
		t.Fatal(err)
	}
	if want, _ = filepath.EvalSymlinks(want); path != want {
		t.Errorf("the kind runs %s, want the build cache's %s", path, want)
	}
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(string(out), "\n"); first != "runsc version "+gvisor.PinnedRunscVersion {
		t.Errorf("%s --version: %q", path, first)
	}
}

// TestRunscRefused: a missing runsc, and one of another version, stop
// Prepare with an error that says what is wrong and how to fix it —
// before any sandbox starts.
func TestRunscRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("gvisor tests need root (runsc, cgroups); run them as root as CI does")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Another runsc: a root-owned program named runsc that reports
	// Debian's version (the launcher's checks pass; only the version is
	// wrong).
	other := filepath.Join(t.TempDir(), "runsc")
	if err := os.WriteFile(other, []byte("#!/bin/sh\necho 'runsc version 0.0~20221219.0'\necho 'spec: 1.1.0-rc.1'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	emptyCache := t.TempDir()
	for _, tc := range []struct {
		name     string
		runsc    string
		env      string // CODEINTERP_RUNSC_DIR
		want     error
		wantText []string
	}{
		{"missing path", "/nonexistent/runsc", "", gvisor.ErrRunscMissing, []string{"/nonexistent/runsc", "make setup"}},
		{"not built", "", emptyCache, gvisor.ErrRunscMissing, []string{"make setup", "build-runsc.sh"}},
		{"another version", other, "", gvisor.ErrRunscVersion, []string{"0.0~20221219.0", gvisor.PinnedRunscVersion, "make setup"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("CODEINTERP_RUNSC_DIR", tc.env)
			}
			k, err := gvisor.New(gvisor.Config{
				RunscPath:       tc.runsc,
				LauncherCommand: []string{self, launchArg},
				StateDir:        t.TempDir() + "/state",
				Limits:          testLimits(),
			}, zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			defer k.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err = k.Prepare(ctx)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Prepare: %v; want %v", err, tc.want)
			}
			for _, s := range tc.wantText {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Prepare: %v; want it to say %q", err, s)
				}
			}
		})
	}
}

// TestSeccompPrecompiled: the sentry of a sandbox of the pinned runsc
// installs its seccomp filter from the programs runtime/build-runsc.sh
// precompiled, instead of building it at every start and restore (the go
// branch of gVisor ships none). Read from runsc's debug log.
func TestSeccompPrecompiled(t *testing.T) {
	state := t.TempDir() + "/state"
	e := newEnv(t, func(c *gvisor.Config) { c.Debug, c.StateDir = true, state })
	s := e.start(t)
	s.expectOK("print(6 * 7)", "42")
	logs, err := filepath.Glob(filepath.Join(state, "i-*", "runsc.log.*boot.txt"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no boot log of the restored sandbox under %s (%v)", state, err)
	}
	for _, f := range logs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "No precompiled program found") {
			t.Errorf("%s: the sentry built its seccomp filter at start (no precompiled program for its options)", f)
		}
		if !strings.Contains(string(b), "Loaded precompiled seccomp instructions") {
			t.Errorf("%s: no precompiled seccomp filter was loaded", f)
		}
	}
}
