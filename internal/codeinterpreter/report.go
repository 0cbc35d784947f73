package codeinterpreter

import (
	"strings"

	"github.com/codeinterp/codeinterp/internal/containerapi"
	"github.com/codeinterp/codeinterp/internal/hostedtool"
	"github.com/codeinterp/codeinterp/internal/sandbox"
)

// Status maps a call's fate to its detailed status: completed, failed (a
// Python exception, a crash, unusable arguments) or incomplete (a limit,
// a call not run).
func Status(argErr string, o hostedtool.Outcome) string {
	switch {
	case argErr != "":
		return "failed"
	case o.NotRun != "":
		return "incomplete"
	}
	switch o.Outcome {
	case sandbox.OutcomeCompleted:
		return "completed"
	case sandbox.OutcomeError, sandbox.OutcomeCrashed:
		return "failed"
	}
	return "incomplete"
}

// Report is what the model is told about a call: one status line, then
// stdout and stderr, then a line about any images (never their bytes).
// o.Shown says whether the client gets the images (it asked for
// code_interpreter_call outputs), so the model does not point the user at
// a chart the user cannot see.
func Report(argErr string, o hostedtool.Outcome) string {
	var b strings.Builder
	b.WriteString("status: ")
	switch {
	case argErr != "":
		b.WriteString("failed: invalid arguments (" + argErr + "); nothing was run. Call the tool with a JSON object like {\"code\": \"print(1 + 1)\"}.\n")
		return b.String()
	case o.NotRun != "":
		b.WriteString("incomplete: not run because " + o.NotRun + ".\n")
		return b.String()
	}
	r := o.Result
	b.WriteString(Status(argErr, o))
	if why := OutcomeReason(r); why != "" {
		b.WriteString(": " + why)
	}
	b.WriteByte('\n')
	switch {
	case o.Reset:
		b.WriteString("note: this ran in a fresh Python interpreter: variables and imports from earlier calls are gone; the container's files in /mnt/data are there.\n")
	case o.Behind:
		b.WriteString("note: this ran in the interpreter restored from the container's last checkpoint, taken before the most recent calls: variables and imports they set may be missing; the container's files in /mnt/data are there.\n")
	case r.StateLost:
		b.WriteString("note: this ran in a fresh interpreter; variables, imports and files from earlier calls are gone.\n")
	}
	section(&b, "stdout", r.Stdout, r.StdoutTruncated)
	section(&b, "stderr", r.Stderr, r.StderrTruncated)
	n, types := ShownImages(r.Images)
	b.WriteString(ImagesLine(n, types, o.Shown))
	if len(o.Changed) > 0 {
		b.WriteString("files written:")
		for _, f := range o.Changed {
			b.WriteString(" " + containerapi.QuotePath("sandbox:"+f.Path) + " (" + containerapi.HumanBytes(f.Bytes) + ")")
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// OutcomeReason says why a run ended as it did, with the sandbox's detail;
// "" for a run that completed.
func OutcomeReason(r sandbox.Result) string {
	var why string
	switch r.Outcome {
	case sandbox.OutcomeCompleted:
		return ""
	case sandbox.OutcomeError:
		why = "a Python exception was raised (traceback in stderr)"
	case sandbox.OutcomeTimeout:
		why = "the run hit the time limit and was stopped; variables from earlier calls are lost"
	case sandbox.OutcomeMemoryLimit:
		why = "the run hit the memory limit and was stopped; variables from earlier calls are lost"
	case sandbox.OutcomeOutputTruncated:
		why = "the code ran to its end, but its output was cut at the size limit"
	case sandbox.OutcomeCapacity:
		why = "the code did not run"
	case sandbox.OutcomeRejected:
		why = "the code was refused before running"
	case sandbox.OutcomeCrashed:
		why = "the interpreter crashed; variables from earlier calls are lost"
	case sandbox.OutcomeCancelled:
		why = "the run was cancelled"
	default:
		why = strings.ReplaceAll(string(r.Outcome), "_", " ")
	}
	if r.Detail != "" {
		why += " (" + oneLine(r.Detail) + ")"
	}
	return why
}

func section(b *strings.Builder, name, text string, truncated bool) {
	if text == "" && !truncated {
		b.WriteString(name + ": (empty)\n")
		return
	}
	b.WriteString(name + ":\n")
	b.WriteString(text)
	if !strings.HasSuffix(text, "\n") {
		b.WriteByte('\n')
	}
	if truncated {
		b.WriteString("[" + name + " truncated]\n")
	}
}

func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	return s
}
