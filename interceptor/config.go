package interceptor

import (
	"errors"
	"fmt"
	"regexp"
)

// functionNameRE is what OpenAI-compatible APIs accept as a function name.
var functionNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

func (c Config) validate() error {
	var errs []error
	check := func(ok bool, field, why string) {
		if !ok {
			errs = append(errs, fmt.Errorf("%s: %s", field, why))
		}
	}
	check(functionNameRE.MatchString(c.FunctionName), "function_name", "must be 1-64 letters, digits, '_' or '-'")
	check(c.MaxRounds > 0, "max_rounds", "must be positive")
	check(c.MaxParallelCalls > 0, "max_parallel_calls", "must be positive")
	check(c.MaxToolCalls > 0, "max_tool_calls", "must be positive")
	check(c.MaxMemoryBytes > 0, "max_memory_limit", "must be positive")
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
