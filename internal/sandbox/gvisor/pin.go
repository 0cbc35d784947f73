package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/codeinterp/codeinterp/internal/buildcache"
)

// PinnedRunscVersion is the gVisor this server is built and reviewed for:
// the version runtime/runsc/go.mod requires (TestPinMatchesGoMod), which
// runtime/build-runsc.sh stamps into the binary (`runsc --version` prints
// "runsc version " and it). Prepare refuses any other runsc: the flags the
// kind passes (systrap, restore --background --direct, checkpoints
// without committed zero pages), the seccomp filters docs/security.md
// describes and the checkpoint format are this version's.
const PinnedRunscVersion = "v0.0.0-20260905035102-160fafc42237"

// RunscPrefix is the name prefix of runtime/build-runsc.sh's output
// directories (runsc-<recipe hash>) in the cache; each holds runsc and a
// MANIFEST.
const RunscPrefix = "runsc-"

// ErrRunscMissing is matched by Prepare's error when the pinned runsc has
// not been built and no other was configured.
var ErrRunscMissing = errors.New("runsc is missing: build the pinned gVisor with `make setup` (runtime/build-runsc.sh)")

// ErrRunscVersion is matched by Prepare's error when runsc is not the
// pinned version.
var ErrRunscVersion = errors.New("runsc is not the pinned version")

// DefaultRunsc finds the runsc the build script made:
// $CODEINTERP_RUNSC_DIR/runsc if that is set, else runsc in the newest
// finished ${XDG_CACHE_HOME:-$HOME/.cache}/codeinterp/runsc-* directory
// whose MANIFEST names the pinned version (a cache shared with a checkout
// of another pin holds its build too).
func DefaultRunsc() (string, error) {
	d, err := buildcache.FindMatching("CODEINTERP_RUNSC_DIR", RunscPrefix, pinnedManifest)
	if err != nil {
		return "", fmt.Errorf("gvisor: %w: %v", ErrRunscMissing, err)
	}
	return filepath.Join(d, "runsc"), nil
}

// resolveRunsc turns the configured runsc ("" for DefaultRunsc, a name
// looked up on PATH, or a path) into the clean absolute path of a file the
// launcher will exec (checkRunsc).
func resolveRunsc(configured string) (string, error) {
	path := configured
	if path == "" {
		var err error
		if path, err = DefaultRunsc(); err != nil {
			return "", err
		}
	}
	found, err := exec.LookPath(path)
	if err != nil {
		return "", fmt.Errorf("gvisor: runsc %q not found (%w): %w", path, err, ErrRunscMissing)
	}
	if found, err = filepath.Abs(found); err != nil {
		return "", fmt.Errorf("gvisor: %w", err)
	}
	if found, err = filepath.EvalSymlinks(found); err != nil {
		return "", fmt.Errorf("gvisor: %w", err)
	}
	if err := checkRunsc(found); err != nil {
		return "", fmt.Errorf("gvisor: %w", err)
	}
	return found, nil
}

// runscVersion runs `runsc --version` and returns the version its first
// line names ("runsc version X").
func runscVersion(ctx context.Context, runsc string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, runsc, "--version")
	cmd.Env = []string{}
	out, err := cmd.Output()
	first, _, _ := strings.Cut(string(out), "\n")
	v, ok := strings.CutPrefix(first, "runsc version ")
	if err != nil || !ok || v == "" {
		return "", fmt.Errorf("gvisor: %s --version: %v: %q", runsc, err, first)
	}
	return v, nil
}

// checkVersion refuses a runsc other than want (PinnedRunscVersion unless
// Config.RunscVersion says otherwise).
func checkVersion(runsc, got, want string) error {
	if want == AnyRunscVersion || got == want {
		return nil
	}
	return fmt.Errorf("gvisor: %s is runsc %s; this server runs the pinned gVisor %s (runtime/runsc/go.mod), "+
		"which `make setup` builds (runtime/build-runsc.sh) and the gVisor image ships: %w",
		runsc, got, want, ErrRunscVersion)
}

// AnyRunscVersion, as Config.RunscVersion, accepts whatever runsc is
// configured: for a baseline measured side by side with another gVisor
// (bench_test.go), never for a server.
const AnyRunscVersion = "*"

// features are the flags of newer runsc this kind uses when the binary
// has them. The pinned runsc has them all; another (AnyRunscVersion) is
// asked through its help text, so an older one runs as it always did.
type features struct {
	// excludeZeroPages: checkpoint --exclude-committed-zero-pages.
	excludeZeroPages bool
	// uncompressed: checkpoint --compression=none, which restore
	// --background needs.
	uncompressed bool
	// background: restore --background (pages load after restore returns).
	background bool
	// direct: restore --direct (O_DIRECT reads of the pages file).
	direct bool
	// leaveRunning: checkpoint --leave-running (the sandbox goes on
	// after its image is written): session checkpoints need it.
	leaveRunning bool
}

// pinnedFeatures is what the pinned runsc has.
func pinnedFeatures() features {
	return features{excludeZeroPages: true, uncompressed: true, background: true, direct: true, leaveRunning: true}
}

// probeFeatures reads runsc's help for checkpoint and restore.
func probeFeatures(ctx context.Context, runsc string) features {
	help := func(cmd string) string {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		c := exec.CommandContext(ctx, runsc, "help", cmd)
		c.Env = []string{}
		out, _ := c.CombinedOutput()
		return string(out)
	}
	cp, rs := help("checkpoint"), help("restore")
	f := features{
		excludeZeroPages: strings.Contains(cp, "-exclude-committed-zero-pages"),
		uncompressed:     strings.Contains(cp, "-compression"),
		direct:           strings.Contains(rs, "-direct"),
		leaveRunning:     strings.Contains(cp, "-leave-running"),
	}
	f.background = f.uncompressed && strings.Contains(rs, "-background")
	return f
}

// checkpointFlags are runsc checkpoint's flags beyond the image path.
func (f features) checkpointFlags() []string {
	var flags []string
	if f.excludeZeroPages {
		// A restore reads every page of an image: the pages a Python
		// touched and left zero need not be written or read.
		flags = append(flags, "--exclude-committed-zero-pages")
	}
	if f.uncompressed {
		// Compression costs the restore more than the disk reads it saves
		// (the image lives on local disk, usually in the page cache), and
		// restore --background needs an uncompressed image.
		flags = append(flags, "--compression=none")
	}
	return flags
}

// restoreFlags are runsc restore's flags beyond the image path and bundle.
func (f features) restoreFlags() []string {
	var flags []string
	if f.background {
		// Pages load while the sandbox already runs: restore returns once
		// the kernel state is in, and the begin frame overlaps the rest.
		flags = append(flags, "--background")
	}
	if f.direct {
		flags = append(flags, "--direct")
	}
	return flags
}

// pinnedManifest reports whether a runsc build's MANIFEST (its first
// line "gvisor.dev/gvisor <version>") is of PinnedRunscVersion.
func pinnedManifest(m []byte) bool {
	first, _, _ := strings.Cut(string(m), "\n")
	return strings.TrimSpace(first) == "gvisor.dev/gvisor "+PinnedRunscVersion
}
