package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/config"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/gvisor"
	"github.com/codeinterp/codeinterp/internal/sandbox/worker"
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
	// Images are the figures the run produced (gVisor provider only).
	Images []execImage `json:"images,omitempty"`
}

type execImage struct {
	MediaType string `json:"media_type"`
	Data      string `json:"data"` // base64
}

// runExec runs code once through the same provider, with the same
// isolation, as the server.
func runExec(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	cfg := config.Default()
	sb := &cfg.Sandbox
	code := fs.String("c", "", "code to run (otherwise a FILE argument, or - / nothing for stdin)")
	fs.StringVar(&sb.Provider, "provider", sb.Provider, "sandbox provider: wasm or gvisor")
	fs.StringVar(&sb.RuntimeDir, "runtime", "", "(wasm) CPython-WASI runtime directory (default: the build cache)")
	fs.StringVar(&sb.GVisor.Runsc, "runsc", sb.GVisor.Runsc, "(gvisor) the runsc binary (default: the pinned one make setup builds)")
	fs.StringVar(&sb.GVisor.Platform, "platform", sb.GVisor.Platform, "(gvisor) runsc platform: "+strings.Join(gvisor.Platforms(), ", "))
	fs.DurationVar(&sb.Limits.RunTimeout, "timeout", sb.Limits.RunTimeout, "wall-time limit of the run")
	memory := fs.String("memory", sb.Limits.GuestMemory.String(), "memory limit of the session (e.g. 256MiB)")
	stdoutMax := fs.String("stdout-limit", sb.Limits.StdoutBytes.String(), "stdout bytes kept")
	stderrMax := fs.String("stderr-limit", sb.Limits.StderrBytes.String(), "stderr bytes kept")
	sourceMax := fs.String("source-limit", sb.Limits.SourceBytes.String(), "largest program accepted")
	fs.StringVar(&sb.Isolation.Cgroup, "cgroup", sb.Isolation.Cgroup, "cgroup isolation: auto, v1, v2 or off")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	src, err := execSource(*code, fs.Args())
	if err != nil {
		return err
	}
	sb.MaxSessions, sb.WarmWorkers = 1, 0
	memSet := false
	fs.Visit(func(f *flag.Flag) { memSet = memSet || f.Name == "memory" })
	for _, f := range []struct {
		name, val string
		dst       *config.ByteSize
	}{
		{"--memory", *memory, &sb.Limits.GuestMemory},
		{"--stdout-limit", *stdoutMax, &sb.Limits.StdoutBytes},
		{"--stderr-limit", *stderrMax, &sb.Limits.StderrBytes},
		{"--source-limit", *sourceMax, &sb.Limits.SourceBytes},
	} {
		v, err := config.ParseByteSize(f.val)
		if err != nil {
			return &usageError{fmt.Sprintf("%s: %v", f.name, err)}
		}
		*f.dst = v
	}
	if !memSet {
		sb.Limits.GuestMemory = config.Default().Sandbox.Limits.GuestMemory
	}
	cfg.ApplyProviderDefaults()
	if sb.Limits.GuestMemory > sb.Limits.MaxGuestMemory {
		sb.Limits.MaxGuestMemory = sb.Limits.GuestMemory
	}
	if sb.Limits.MaxGuestMemory > cfg.Interceptor.MaxMemoryLimit {
		cfg.Interceptor.MaxMemoryLimit = sb.Limits.MaxGuestMemory
	}
	if err := cfg.Validate(); err != nil {
		return &usageError{err.Error()}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	log, _ := zap.NewProduction()
	if sb.Isolation.Cgroup != "off" {
		log = zap.NewNop() // keep stdout/stderr clean for the JSON result
	}
	p, _, err := newProvider(ctx, cfg, self, true, nil, nil, nil, nil, log)
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
	for _, im := range res.Images {
		out.Images = append(out.Images, execImage{MediaType: im.MediaType, Data: base64.StdEncoding.EncodeToString(im.Data)})
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
