package main

import (
	"debug/buildinfo"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// buildWorker builds cmd/wasm-worker into dir and returns its path.
func buildWorker(t *testing.T, dir string) string {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", dir+"/", "../wasm-worker")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/wasm-worker: %v\n%s", err, out)
	}
	return filepath.Join(dir, wasmWorkerBinary)
}

func TestSameBuild(t *testing.T) {
	dir := t.TempDir()
	worker := buildWorker(t, dir)
	ref, err := buildinfo.ReadFile(worker)
	if err != nil {
		t.Fatal(err)
	}
	if len(ref.Deps) == 0 {
		t.Fatal("wasm-worker links no module: the dependency check would check nothing")
	}
	setting := func(key, value string) func(*debug.BuildInfo) {
		return func(bi *debug.BuildInfo) {
			for i := range bi.Settings {
				if bi.Settings[i].Key == key {
					bi.Settings[i].Value = value
					return
				}
			}
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: key, Value: value})
		}
	}
	script := filepath.Join(dir, "script")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	unexec := filepath.Join(dir, "unexec")
	data, err := os.ReadFile(worker)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(unexec, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		path   string
		change func(*debug.BuildInfo) // applied to the server's build information
		want   string                 // in the error; "" for none
	}{
		{"the same build", worker, nil, ""},
		{"another Go", worker, func(bi *debug.BuildInfo) { bi.GoVersion = "go1.0" }, "built with"},
		{"another module version", worker, func(bi *debug.BuildInfo) { bi.Main.Version = "v9.9.9" }, "is module"},
		{"another revision", worker, setting("vcs.revision", "0123456789abcdef"), "vcs.revision"},
		{"modified against clean", worker, setting("vcs.modified", "maybe"), "vcs.modified"},
		{"another version of a module it links", worker, func(bi *debug.BuildInfo) {
			bi.Deps[0] = &debug.Module{Path: bi.Deps[0].Path, Version: "v0.0.0-other"}
		}, "links " + ref.Deps[0].Path},
		{"a module the server does not link", worker, func(bi *debug.BuildInfo) { bi.Deps = bi.Deps[1:] }, "nothing of that module"},
		{"missing", filepath.Join(dir, "absent"), nil, "no wasm-worker"},
		{"not executable", unexec, nil, "not an executable file"},
		{"not a Go binary", script, nil, "build information"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			own := *ref
			own.Deps = append([]*debug.Module(nil), ref.Deps...)
			own.Settings = append([]debug.BuildSetting(nil), ref.Settings...)
			if tc.change != nil {
				tc.change(&own)
			}
			err := sameBuild(&own, tc.path)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("sameBuild: %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("sameBuild: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestWASMWorkerCommand: without a wasm-worker beside it the server runs
// itself as the worker and says why; with one built from the same source
// it starts that one.
func TestWASMWorkerCommand(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "extproc")
	core, logs := observer.New(zap.InfoLevel)
	got := wasmWorkerCommand(self, zap.New(core))
	if len(got) != 2 || got[0] != self || got[1] != workerCommand {
		t.Fatalf("without wasm-worker: %v, want the server itself", got)
	}
	if l := logs.FilterMessageSnippet("wasm workers are the server itself").All(); len(l) != 1 || !strings.Contains(l[0].ContextMap()["why"].(string), "no wasm-worker") {
		t.Fatalf("logs %v: want one line saying no wasm-worker was found", logs.All())
	}
	worker := buildWorker(t, dir)
	// This test binary's build information and worker fingerprint are
	// those of the source the wasm-worker was just built from.
	if got = wasmWorkerCommand(self, zap.New(core)); len(got) != 1 || got[0] != worker {
		t.Fatalf("beside a wasm-worker of the same source: %v, want [%s]", got, worker)
	}
}

// TestSameFingerprint: a worker binary whose fingerprint differs from the
// server's, or that cannot say, is refused.
func TestSameFingerprint(t *testing.T) {
	dir := t.TempDir()
	if err := sameFingerprint(buildWorker(t, dir)); err != nil {
		t.Fatalf("the wasm-worker built from this source: %v", err)
	}
	for _, tc := range []struct{ name, script, want string }{
		{"another fingerprint", "#!/bin/sh\necho 0123456789abcdef0123456789abcdef\n", "built from other source"},
		{"no fingerprint mode", "#!/bin/sh\necho 'worker: unknown mode' >&2; exit 1\n", "exit status 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), wasmWorkerBinary)
			if err := os.WriteFile(p, []byte(tc.script), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := sameFingerprint(p); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("sameFingerprint: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
