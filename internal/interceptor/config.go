package interceptor

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/codeinterp/codeinterp/internal/memlimit"
)

// FollowUpMode says how a follow-up inference carries the conversation so far.
type FollowUpMode string

// The follow-up modes.
const (
	// FollowUpAuto uses previous_response_id when the upstream stored the
	// previous response (it answered with "store": true and an id), and
	// replays otherwise.
	FollowUpAuto FollowUpMode = "auto"
	// FollowUpReplay sends the request's input, every output item so far and
	// the function_call_output items again.
	FollowUpReplay FollowUpMode = "replay"
	// FollowUpPreviousResponseID sends previous_response_id and only the new
	// function_call_output items. It needs an upstream that stores responses.
	FollowUpPreviousResponseID FollowUpMode = "previous_response_id"
)

// Config is the operator's configuration of the interceptor. Zero fields take
// the defaults of DefaultConfig (see WithDefaults).
type Config struct {
	// FunctionName is the name of the function tool the native
	// code_interpreter tool becomes upstream. Default "code_interpreter".
	FunctionName string
	// MaxRounds caps the follow-up inferences of one client request (so the
	// upstream sees at most MaxRounds+1 requests). The last permitted
	// follow-up is sent with tool_choice "none" so the model answers. A client
	// cannot raise it. Default 8.
	MaxRounds int
	// MaxParallelCalls caps the code calls of one model turn that are run;
	// further calls in the same turn are answered "not run" (status
	// incomplete). A session serialises its runs, so the calls of a turn run
	// one after another in output order, which keeps shared Python state
	// deterministic. Default 4.
	MaxParallelCalls int
	// MaxToolCalls caps the code calls run for one client request. The
	// request's max_tool_calls can lower it, never raise it. Default 32.
	MaxToolCalls int
	// MaxMemoryBytes is the largest container memory_limit a client may ask
	// for ("1g" style); above it the request gets a 400. Default 1 GiB.
	MaxMemoryBytes int64
	// FollowUp selects how follow-ups carry the conversation. Default auto.
	FollowUp FollowUpMode
	// MaxBodyBytes rejects larger intercepted requests with a 413. 0 means
	// no limit here (the filter enforces the transport's limit).
	MaxBodyBytes int
	// InputFiles says what the model gets of a request's input_file parts
	// (which are copied into the container either way): InputFilesPass
	// (default) sends them on unchanged, InputFilesNote replaces each with
	// a text note saying where the file is (for models that reject files).
	InputFiles string
	// CallStatus is the status clients get on a code_interpreter_call:
	// CallStatusOpenAI (default) says "completed" for every call that
	// ended, whatever the code did, as OpenAI's hosted tool does (its
	// clients' schemas — the Agents SDK's — admit no other final status),
	// with the reason in the call's logs; CallStatusDetailed says "failed"
	// for a Python exception or a crash and "incomplete" for a limit or a
	// call not run. The model is told the detailed status either way.
	CallStatus string
	// History says how a request continuing a stored response (one of
	// ours, WithResponses) reaches the model server: HistoryAuto
	// (default), HistoryUpstream or HistoryExpand.
	History HistoryMode
}

// The call_status modes.
const (
	CallStatusOpenAI   = "openai"
	CallStatusDetailed = "detailed"
)

// The input_files modes.
const (
	InputFilesPass = "pass"
	InputFilesNote = "note"
)

// DefaultConfig returns the documented defaults. A fresh value each call.
func DefaultConfig() Config {
	return Config{
		FunctionName:     "code_interpreter",
		MaxRounds:        8,
		MaxParallelCalls: 4,
		MaxToolCalls:     32,
		MaxMemoryBytes:   memlimit.DefaultBytes,
		FollowUp:         FollowUpAuto,
		InputFiles:       InputFilesPass,
		CallStatus:       CallStatusOpenAI,
		History:          HistoryAuto,
	}
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	if c.FunctionName == "" {
		c.FunctionName = d.FunctionName
	}
	if c.MaxRounds == 0 {
		c.MaxRounds = d.MaxRounds
	}
	if c.MaxParallelCalls == 0 {
		c.MaxParallelCalls = d.MaxParallelCalls
	}
	if c.MaxToolCalls == 0 {
		c.MaxToolCalls = d.MaxToolCalls
	}
	if c.MaxMemoryBytes == 0 {
		c.MaxMemoryBytes = d.MaxMemoryBytes
	}
	if c.FollowUp == "" {
		c.FollowUp = d.FollowUp
	}
	if c.InputFiles == "" {
		c.InputFiles = InputFilesPass
	}
	if c.CallStatus == "" {
		c.CallStatus = d.CallStatus
	}
	if c.History == "" {
		c.History = d.History
	}
	return c
}

// functionNameRE is what OpenAI-compatible APIs accept as a function name.
var functionNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// Validate reports every invalid field, by name.
func (c Config) Validate() error {
	var errs []error
	check := func(ok bool, field, why string) {
		if !ok {
			errs = append(errs, fmt.Errorf("%s: %s", field, why))
		}
	}
	check(functionNameRE.MatchString(c.FunctionName), "function_name",
		fmt.Sprintf("%q must be 1-64 characters of a-z, A-Z, 0-9, _ or - (OpenAI function names)", c.FunctionName))
	// The hosted shell's function is "shell" (shelltool.FunctionName):
	// one name for two tools would make their calls indistinguishable.
	check(c.FunctionName != "shell", "function_name", `"shell" is the hosted shell tool's function`)
	check(c.MaxRounds >= 1 && c.MaxRounds <= 100, "max_rounds", fmt.Sprintf("%d must be between 1 and 100", c.MaxRounds))
	check(c.MaxParallelCalls >= 1 && c.MaxParallelCalls <= 64, "max_parallel_calls", fmt.Sprintf("%d must be between 1 and 64", c.MaxParallelCalls))
	check(c.MaxToolCalls >= 1 && c.MaxToolCalls <= 1000, "max_tool_calls", fmt.Sprintf("%d must be between 1 and 1000", c.MaxToolCalls))
	// A smaller container would not start CPython.
	check(c.MaxMemoryBytes >= 32<<20, "max_memory_limit", fmt.Sprintf("%d bytes must be at least 32MiB", c.MaxMemoryBytes))
	check(c.MaxBodyBytes >= 0, "max_body_bytes", "must not be negative")
	switch c.FollowUp {
	case FollowUpAuto, FollowUpReplay, FollowUpPreviousResponseID:
	default:
		errs = append(errs, fmt.Errorf("follow_up: %q is not one of auto, replay, previous_response_id", c.FollowUp))
	}
	switch c.InputFiles {
	case InputFilesPass, InputFilesNote:
	default:
		errs = append(errs, fmt.Errorf("input_files: %q is not one of pass, note", c.InputFiles))
	}
	switch c.CallStatus {
	case CallStatusOpenAI, CallStatusDetailed:
	default:
		errs = append(errs, fmt.Errorf("call_status: %q is not one of openai, detailed", c.CallStatus))
	}
	switch c.History {
	case HistoryAuto, HistoryUpstream, HistoryExpand:
	default:
		errs = append(errs, fmt.Errorf("history: %q is not one of auto, upstream, expand", c.History))
	}
	return errors.Join(errs...)
}
