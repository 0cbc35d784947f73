package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// extprocBinary is built once per test run: the exec command re-executes
// its own binary as the sandbox worker, so it must be a real build.
func extprocBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(os.TempDir(), "codeinterp-extproc-test")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestExecCommand(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("extproc exec tests need root (cgroups); run them as root as CI does")
	}
	bin := extprocBinary(t)
	file := filepath.Join(t.TempDir(), "prog.py")
	if err := os.WriteFile(file, []byte("print(sum(range(10)))\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name       string
		args       []string
		stdin      string
		wantExit   int
		wantStatus string
		wantStdout string
		wantErr    string // in the command's stderr
	}{
		{name: "-c", args: []string{"-c", "print(25)"}, wantStatus: "completed", wantStdout: "25\n"},
		{name: "file", args: []string{file}, wantStatus: "completed", wantStdout: "45\n"},
		{name: "stdin", args: []string{"-"}, stdin: "print('from stdin')", wantStatus: "completed", wantStdout: "from stdin\n"},
		{name: "python error", args: []string{"-c", "1/0"}, wantStatus: "error"},
		{name: "timeout", args: []string{"--timeout", "500ms", "-c", "while True: pass"}, wantStatus: "timeout"},
		{name: "memory", args: []string{"--memory", "64MiB", "-c", "x = bytearray(200 * 2**20)"}, wantStatus: "memory_limit"},
		{name: "output bound", args: []string{"--stdout-limit", "1KiB", "-c", "print('x' * 5000)"}, wantStatus: "output_truncated"},
		{name: "source bound", args: []string{"--source-limit", "10", "-c", "print('longer than ten')"}, wantStatus: "rejected"},
		{name: "unknown flag", args: []string{"--bogus"}, wantExit: 2, wantErr: "bogus"},
		{name: "bad memory", args: []string{"--memory", "lots", "-c", "1"}, wantExit: 2, wantErr: "--memory"},
		{name: "both -c and file", args: []string{"-c", "1", file}, wantExit: 2, wantErr: "not both"},
		{name: "missing file", args: []string{"/nonexistent/x.py"}, wantExit: 2, wantErr: "no such file"},
		{name: "missing runtime", args: []string{"--runtime", "/nonexistent", "-c", "1"}, wantExit: 1, wantErr: "make runtime"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(bin, append([]string{"exec"}, c.args...)...)
			cmd.Stdin = strings.NewReader(c.stdin)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != c.wantExit {
				t.Fatalf("exit %d, want %d; stderr %s", code, c.wantExit, stderr.String())
			}
			if c.wantErr != "" && !strings.Contains(stderr.String(), c.wantErr) {
				t.Errorf("stderr %q lacks %q", stderr.String(), c.wantErr)
			}
			if c.wantExit != 0 {
				return
			}
			var out struct {
				Status     string   `json:"status"`
				Stdout     string   `json:"stdout"`
				Stderr     string   `json:"stderr"`
				DurationMS *float64 `json:"duration_ms"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
				t.Fatalf("output is not one JSON object: %v\n%s", err, stdout.String())
			}
			if out.Status != c.wantStatus || out.DurationMS == nil {
				t.Fatalf("status %q (duration %v), want %q; %s", out.Status, out.DurationMS, c.wantStatus, stdout.String())
			}
			if c.wantStdout != "" && out.Stdout != c.wantStdout {
				t.Errorf("stdout %q, want %q", out.Stdout, c.wantStdout)
			}
		})
	}
}
