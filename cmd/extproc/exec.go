package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/config"
	"github.com/codeinterp/codeinterp/sandbox"
	"github.com/codeinterp/codeinterp/sandbox/pool"
	"github.com/codeinterp/codeinterp/sandbox/worker"
)

// runWorker is the hidden worker command's body.
func runWorker(args []string) int { return worker.Main(args) }

// execOutput is what `extproc exec` prints.
type execOutput struct {
	Status          sandbox.Outcome `json:"status"`
	Stdout          string          `json:"stdout"`
	Stderr          string          `json:"stderr"`
	DurationMS      float64         `json:"duration_ms"`
	StdoutTruncated bool            `json:"stdout_truncated"`
	StderrTruncated bool            `json:"stderr_truncated"`
	Detail          string          `json:"detail,omitempty"`
}

// runExec runs code once through the same pool, with the same isolation, as
// the server.
func runExec(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	def := pool.DefaultConfig()
	code := fs.String("c", "", "code to run (otherwise a FILE argument, or - / nothing for stdin)")
	runtimeDir := fs.String("runtime", "", "CPython-WASI runtime directory (default: the build cache)")
	timeout := fs.Duration("timeout", def.Limits.RunTimeout, "wall-time limit of the run")
	memory := fs.String("memory", config.ByteSize(def.Limits.GuestMemoryBytes).String(), "guest memory limit (e.g. 256MiB)")
	stdoutMax := fs.String("stdout-limit", config.ByteSize(def.Limits.StdoutBytes).String(), "stdout bytes kept")
	stderrMax := fs.String("stderr-limit", config.ByteSize(def.Limits.StderrBytes).String(), "stderr bytes kept")
	sourceMax := fs.String("source-limit", config.ByteSize(def.Limits.SourceBytes).String(), "largest program accepted")
	cgroupMode := fs.String("cgroup", def.Isolation.Cgroup, "cgroup isolation: auto, v1, v2 or off")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	src, err := execSource(*code, fs.Args())
	if err != nil {
		return err
	}
	cfg := def
	cfg.MaxSessions, cfg.WarmWorkers = 1, 0
	cfg.Limits.RunTimeout = *timeout
	cfg.Isolation.Cgroup = *cgroupMode
	for _, f := range []struct {
		name, val string
		dst       *int64
	}{{"--memory", *memory, &cfg.Limits.GuestMemoryBytes}} {
		v, err := config.ParseByteSize(f.val)
		if err != nil {
			return &usageError{fmt.Sprintf("%s: %v", f.name, err)}
		}
		*f.dst = int64(v)
	}
	if cfg.Limits.GuestMemoryBytes > cfg.Limits.MaxGuestMemoryBytes {
		cfg.Limits.MaxGuestMemoryBytes = cfg.Limits.GuestMemoryBytes
	}
	for _, f := range []struct {
		name, val string
		dst       *int
	}{{"--stdout-limit", *stdoutMax, &cfg.Limits.StdoutBytes}, {"--stderr-limit", *stderrMax, &cfg.Limits.StderrBytes}, {"--source-limit", *sourceMax, &cfg.Limits.SourceBytes}} {
		v, err := config.ParseByteSize(f.val)
		if err != nil {
			return &usageError{fmt.Sprintf("%s: %v", f.name, err)}
		}
		*f.dst = int(v)
	}
	if cfg.RuntimeDir = *runtimeDir; cfg.RuntimeDir == "" {
		if cfg.RuntimeDir, err = pool.DefaultRuntimeDir(); err != nil {
			return err
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cfg.WorkerCommand = []string{self, workerCommand}
	if err := cfg.Validate(); err != nil {
		return &usageError{err.Error()}
	}
	log, _ := zap.NewProduction()
	if *cgroupMode != "off" {
		log = zap.NewNop() // keep stdout/stderr clean for the JSON result
	}
	p, err := pool.New(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer p.Close()
	sess, err := p.Open(ctx, sandbox.SessionOptions{})
	if err != nil {
		return err
	}
	defer sess.Close()
	res, err := sess.Run(ctx, src)
	if err != nil {
		return err
	}
	out := execOutput{
		Status: res.Outcome, Stdout: res.Stdout, Stderr: res.Stderr,
		DurationMS:      float64(res.Duration) / float64(time.Millisecond),
		StdoutTruncated: res.StdoutTruncated, StderrTruncated: res.StderrTruncated, Detail: res.Detail,
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func execSource(code string, rest []string) (string, error) {
	switch {
	case code != "" && len(rest) > 0:
		return "", &usageError{"give either -c CODE or a file, not both"}
	case code != "":
		return code, nil
	case len(rest) > 1:
		return "", &usageError{"at most one file"}
	case len(rest) == 1 && rest[0] != "-":
		b, err := os.ReadFile(rest[0])
		if err != nil {
			return "", &usageError{err.Error()}
		}
		return string(b), nil
	}
	b, err := io.ReadAll(io.LimitReader(os.Stdin, 64<<20))
	return string(b), err
}
