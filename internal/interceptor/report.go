package interceptor

import (
	"strings"

	"github.com/codeinterp/codeinterp/internal/containerapi"
	"github.com/codeinterp/codeinterp/internal/sandbox"
)

// This file says what became of a call: its code_interpreter_call status,
// what the model is told (modelOutput) and what the client sees of it
// (logs, statusNote).

// ciStatus maps a call's fate to the code_interpreter_call status.
func ciStatus(c *call) string {
	switch {
	case c.argErr != "":
		return "failed"
	case c.notRun != "":
		return "incomplete"
	}
	switch c.res.Outcome {
	case sandbox.OutcomeCompleted:
		return "completed"
	case sandbox.OutcomeError, sandbox.OutcomeCrashed:
		return "failed"
	}
	return "incomplete"
}

// modelOutput is what the model is told about a call: one status line, then
// stdout and stderr, then a line about any images (never their bytes).
// imagesShown says whether the client gets the images (it asked for
// code_interpreter_call outputs), so the model does not point the user at a
// chart the user cannot see.
func modelOutput(c *call, imagesShown bool) string {
	var b strings.Builder
	b.WriteString("status: ")
	switch {
	case c.argErr != "":
		b.WriteString("failed: invalid arguments (" + c.argErr + "); nothing was run. Call the tool with a JSON object like {\"code\": \"print(1 + 1)\"}.\n")
		return b.String()
	case c.notRun != "":
		b.WriteString("incomplete: not run because " + c.notRun + ".\n")
		return b.String()
	}
	r := c.res
	b.WriteString(ciStatus(c))
	if why := outcomeReason(r); why != "" {
		b.WriteString(": " + why)
	}
	b.WriteByte('\n')
	switch {
	case c.reset:
		b.WriteString("note: this ran in a fresh Python interpreter: variables and imports from earlier calls are gone; the container's files in /mnt/data are there.\n")
	case c.behind:
		b.WriteString("note: this ran in the interpreter restored from the container's last checkpoint, taken before the most recent calls: variables and imports they set may be missing; the container's files in /mnt/data are there.\n")
	case r.StateLost:
		b.WriteString("note: this ran in a fresh interpreter; variables, imports and files from earlier calls are gone.\n")
	}
	section(&b, "stdout", r.Stdout, r.StdoutTruncated)
	section(&b, "stderr", r.Stderr, r.StderrTruncated)
	n, types := shownImages(r.Images)
	b.WriteString(imagesLine(n, types, imagesShown))
	if len(c.changed) > 0 {
		b.WriteString("files written:")
		for _, f := range c.changed {
			b.WriteString(" " + containerapi.QuotePath("sandbox:"+f.Path) + " (" + containerapi.HumanBytes(f.Bytes) + ")")
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// outcomeReason says why a run ended as it did, with the sandbox's detail;
// "" for a run that completed.
func outcomeReason(r sandbox.Result) string {
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

// statusNote is the last line of a call's logs that says why it did not
// complete, for clients told "completed" (interceptor.call_status: openai);
// "" when it completed or a Python traceback already says it.
func statusNote(c *call) string {
	switch {
	case c.argErr != "":
		return "[not run: invalid arguments (" + c.argErr + ")]"
	case c.notRun != "":
		return "[not run: " + c.notRun + "]"
	case c.res.Outcome == sandbox.OutcomeCompleted, c.res.Outcome == sandbox.OutcomeError:
		return ""
	}
	return "[" + ciStatus(c) + ": " + outcomeReason(c.res) + "]"
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

// logs is the client-visible text output of a call: stdout, then stderr.
func logs(c *call) string {
	out, errOut := c.res.Stdout, c.res.Stderr
	if out != "" && errOut != "" && !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	return out + errOut
}
