package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"image/png"
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

// TestExecGVisor: `extproc exec --provider gvisor` runs Debian's CPython
// with pandas and matplotlib in gVisor and prints the figures as images.
func TestExecGVisor(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("extproc exec tests need root (runsc, cgroups); run them as root as CI does")
	}
	bin := extprocBinary(t)
	code := "import pandas as pd, matplotlib.pyplot as plt\n" +
		"df = pd.DataFrame({'x': range(10), 'y': [v * v for v in range(10)]})\n" +
		"df.plot(x='x', y='y', figsize=(4, 3)); plt.show()\n" +
		"print(df.y.sum())"
	cmd := exec.Command(bin, "exec", "--provider", "gvisor", "-c", code)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\nstderr %s", err, stderr.String())
	}
	var out struct {
		Status string `json:"status"`
		Stdout string `json:"stdout"`
		Images []struct {
			MediaType string `json:"media_type"`
			Data      []byte `json:"data"` // base64 in JSON
		} `json:"images"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, stdout.String())
	}
	if out.Status != "completed" || out.Stdout != "285\n" {
		t.Fatalf("status %q stdout %q; %s", out.Status, out.Stdout, stderr.String())
	}
	if len(out.Images) != 1 || out.Images[0].MediaType != "image/png" {
		t.Fatalf("images %d, want one PNG", len(out.Images))
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(out.Images[0].Data))
	if err != nil {
		t.Fatalf("the image does not decode as a PNG: %v", err)
	}
	if r := float64(cfg.Width) / float64(cfg.Height); r < 1.1 || r > 1.6 {
		t.Errorf("figure is %dx%d, want about 4:3", cfg.Width, cfg.Height)
	}
	// Without runsc the command fails closed and says how to build it.
	cmd = exec.Command(bin, "exec", "--provider", "gvisor", "--runsc", "/nonexistent/runsc", "-c", "1")
	stderr.Reset()
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), "runsc") || !strings.Contains(stderr.String(), "make setup") {
		t.Errorf("missing runsc: err %v, stderr %q; want a failure that says to build runsc with make setup", err, stderr.String())
	}
}
