package gvisor

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
)

// This file is the host end of the hosted shell (pool.Sheller): the kernel
// runs each command by bash (kernel.py, shell) and answers with
// shell_output frames while a command runs and one shell_result frame.

// The shell's frame kinds.
const (
	kindShell       = "shell"        // host → kernel
	kindShellOutput = "shell_output" // kernel → host: a piece of a command's output
	kindShellResult = "shell_result" // kernel → host
)

type shellRequest struct {
	ID        uint64   `json:"id"`
	Commands  []string `json:"commands"`
	TimeoutNS int64    `json:"timeout_ns"`
	StdoutMax int      `json:"stdout_max"`
	StderrMax int      `json:"stderr_max"`
}

type shellOutput struct {
	ID      uint64 `json:"id"`
	Command int    `json:"command"`
	Stdout  []byte `json:"stdout,omitempty"`
	Stderr  []byte `json:"stderr,omitempty"`
}

type shellResult struct {
	ID       uint64         `json:"id"`
	Commands []shellCommand `json:"commands"`
	Error    string         `json:"error,omitempty"`
}

type shellCommand struct {
	Stdout        []byte `json:"stdout"`
	Stderr        []byte `json:"stderr"`
	StdoutDropped int64  `json:"stdout_dropped"`
	StderrDropped int64  `json:"stderr_dropped"`
	ExitCode      int    `json:"exit_code"`
	TimedOut      bool   `json:"timed_out"`
}

var _ pool.Sheller = (*interp)(nil)

// Shell implements pool.Sheller. The guest can write to the control FIFO,
// so every frame is checked against the request (its id, the command
// index, the output bounds) before anything of it is believed; a frame
// that fails is a protocol error and the pool kills the sandbox.
func (it *interp) Shell(ctx context.Context, runID uint64, commands []string, timeout time.Duration, onOutput func(int, string, string)) ([]sandbox.CommandResult, error) {
	select {
	case <-it.proc.Exited():
		return nil, fmt.Errorf("gvisor: the sandbox has exited (%v)%s", it.proc.Err(), it.diagSuffix())
	default:
	}
	lim := it.limits
	// The kernel kills each command at its timeout; the host kills the
	// sandbox once the whole call is past the sum and a grace.
	hardAfter := time.Duration(len(commands))*(timeout+killGrace) + killGrace
	hard := time.NewTimer(hardAfter)
	defer hard.Stop()
	req := &frame{Kind: kindShell, Shell: &shellRequest{ID: runID, Commands: commands, TimeoutNS: timeout.Nanoseconds(),
		StdoutMax: lim.StdoutBytes, StderrMax: lim.StderrBytes}}
	if err := it.send(req, time.Now().Add(hardAfter)); err != nil {
		return nil, err
	}
	bad := func(why string, args ...any) error {
		return fmt.Errorf("gvisor: the kernel broke protocol: "+why, args...)
	}
	seen := make([][2]int, len(commands)) // output bytes sent per command
	for {
		select {
		case f, ok := <-it.frames.C():
			if !ok {
				return nil, fmt.Errorf("gvisor: control channel: %w", it.frames.Err())
			}
			switch {
			case f.Kind == kindShellOutput && f.ShellOutput != nil:
				o := f.ShellOutput
				if o.ID != runID || o.Command < 0 || o.Command >= len(commands) {
					return nil, bad("shell output for run %d command %d", o.ID, o.Command)
				}
				s := &seen[o.Command]
				s[0] += len(o.Stdout)
				s[1] += len(o.Stderr)
				if s[0] > lim.StdoutBytes || s[1] > lim.StderrBytes {
					return nil, bad("more shell output than its bound")
				}
				if onOutput != nil {
					onOutput(o.Command, string(o.Stdout), string(o.Stderr))
				}
			case f.Kind == kindShellResult && f.ShellResult != nil:
				return it.checkShell(f.ShellResult, runID, len(commands))
			default:
				return nil, bad("sent %q while a shell call was waiting", f.Kind)
			}
		case <-it.proc.Exited():
			return nil, fmt.Errorf("gvisor: the sandbox exited during a shell call (%v)%s", it.proc.Err(), it.diagSuffix())
		case <-hard.C:
			it.Kill()
			return nil, fmt.Errorf("gvisor: the sandbox did not answer a shell call within %s and was killed", hardAfter)
		case <-ctx.Done():
			return nil, fmt.Errorf("gvisor: shell: %w", ctx.Err())
		}
	}
}

func (it *interp) checkShell(r *shellResult, runID uint64, n int) ([]sandbox.CommandResult, error) {
	bad := func(why string, args ...any) error {
		return fmt.Errorf("gvisor: the kernel broke protocol: "+why, args...)
	}
	switch {
	case r.ID != runID:
		return nil, bad("shell result for run %d, want %d", r.ID, runID)
	case r.Error != "":
		return nil, fmt.Errorf("gvisor: the kernel's shell failed: %.100s", r.Error)
	case len(r.Commands) != n:
		return nil, bad("%d shell results for %d commands", len(r.Commands), n)
	}
	out := make([]sandbox.CommandResult, n)
	for k, c := range r.Commands {
		if len(c.Stdout) > it.limits.StdoutBytes || len(c.Stderr) > it.limits.StderrBytes || c.StdoutDropped < 0 || c.StderrDropped < 0 {
			return nil, bad("a shell result above its bound")
		}
		out[k] = sandbox.CommandResult{
			Stdout: text(c.Stdout), Stderr: text(c.Stderr),
			StdoutTruncated: c.StdoutDropped > 0, StderrTruncated: c.StderrDropped > 0,
			ExitCode: c.ExitCode, TimedOut: c.TimedOut,
		}
	}
	return out, nil
}

// text is command output as text: bytes that are not UTF-8 (binary
// output, a character cut at the bound) become U+FFFD, as JSON carries
// only text.
func text(b []byte) string { return strings.ToValidUTF8(string(b), "\uFFFD") }
