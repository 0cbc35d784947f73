package sandbox

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"
)

// This file is a session's second kind of action beside a Python cell: shell
// commands (OpenAI's hosted shell tool), run by providers that have a shell.

// ShellRequest is one hosted-shell call: commands run one after another,
// each by `bash -lc` with cwd /mnt/data, no TTY, the session's user, limits
// and network.
type ShellRequest struct {
	Commands []string `json:"commands"`
	// Timeout bounds each command's wall time (the caller applies the
	// operator's maximum); a command still running then is killed with its
	// process group and reported TimedOut.
	Timeout time.Duration `json:"timeout"`
	// OnOutput, when set, is told each piece of a command's output as it
	// comes, while the command runs (bounded like the result: nothing past
	// a stream's bound is sent), as text that never splits a UTF-8
	// character (TextPieces). It is called from the run's goroutine and
	// must not block for long. It stays on this server: a run forwarded to
	// another replica reports its output with the result only.
	OnOutput func(command int, stdout, stderr string) `json:"-"`
}

// CommandResult is what one command of a ShellRequest produced. Output is
// bounded at the sandbox boundary (the provider's stdout/stderr bounds per
// command); what was cut is counted.
type CommandResult struct {
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	// ExitCode is bash's exit status (128+n when a signal ended it).
	ExitCode int `json:"exit_code"`
	// TimedOut: the command ran past ShellRequest.Timeout and was killed.
	TimedOut bool `json:"timed_out,omitempty"`
	// NotRun: an earlier command's failure of the sandbox (not of the
	// command) kept it from running.
	NotRun bool `json:"not_run,omitempty"`
}

// Sheller is implemented by sessions whose provider has a shell. Outcomes
// of the commands themselves (exit codes, timeouts) are in Result.Commands,
// one per command; Result.Outcome is OutcomeCompleted when every command
// got to run (whatever its exit code), and another outcome when the sandbox
// failed under them (crashed, memory, cancelled), with the commands that
// did not run marked NotRun. An error means nothing could be attempted.
type Sheller interface {
	Shell(ctx context.Context, req ShellRequest) (Result, error)
}

// ErrNoShell is matched by errors of a provider (or a session) that has no
// shell: the WASM provider runs Python only.
var ErrNoShell = errors.New("sandbox: this provider has no shell")

// Shell runs req on s when its provider has a shell, else fails with
// ErrNoShell.
func Shell(ctx context.Context, s Session, req ShellRequest) (Result, error) {
	sh, ok := s.(Sheller)
	if !ok {
		return Result{}, ErrNoShell
	}
	return sh.Shell(ctx, req)
}

// TextPieces passes a command's output pieces on as text that never splits
// a UTF-8 character: the bytes of a character cut at a piece's end wait for
// the next piece of the same stream; invalid bytes become U+FFFD (as the
// result's text has them). A provider wraps ShellRequest.OnOutput in it,
// since the sandbox reads its pipes in chunks that know no characters.
type TextPieces struct {
	f     func(command int, stdout, stderr string)
	cmd   int
	carry [2][]byte
}

// NewTextPieces passes pieces on to f.
func NewTextPieces(f func(command int, stdout, stderr string)) *TextPieces {
	return &TextPieces{f: f}
}

// Piece takes one piece of command's output.
func (t *TextPieces) Piece(command int, stdout, stderr string) {
	if command != t.cmd {
		t.Flush()
		t.cmd = command
	}
	out, errOut := t.take(0, stdout), t.take(1, stderr)
	if out != "" || errOut != "" {
		t.f(command, out, errOut)
	}
}

// Flush passes on what waits of the current command's output (a cut
// character, as U+FFFD): its output has ended.
func (t *TextPieces) Flush() {
	out, errOut := string(t.carry[0]), string(t.carry[1])
	t.carry[0], t.carry[1] = t.carry[0][:0], t.carry[1][:0]
	if out != "" || errOut != "" {
		t.f(t.cmd, strings.ToValidUTF8(out, "\uFFFD"), strings.ToValidUTF8(errOut, "\uFFFD"))
	}
}

func (t *TextPieces) take(k int, s string) string {
	if s == "" {
		return ""
	}
	b := append(t.carry[k], s...)
	cut := len(b)
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				cut = i
			}
			break
		}
	}
	text := strings.ToValidUTF8(string(b[:cut]), "\uFFFD")
	t.carry[k] = append(t.carry[k][:0], b[cut:]...)
	return text
}
