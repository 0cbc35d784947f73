package interceptor

import (
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/sandbox"
)

func sprintf(format string, args ...any) string {
	if len(args) == 0 {
		return format
	}
	return fmt.Sprintf(format, args...)
}

// toolDescription tells the model what the function gives it. It mirrors
// what OpenAI's hosted tool offers, minus what this sandbox lacks.
const toolDescription = "Runs Python 3.13 code in a sandboxed interpreter and returns its stdout, stderr and a status line. " +
	"Only the Python standard library is available (no third-party packages such as numpy or pandas) and there is no network access. " +
	"Print what you need to see: only printed output is returned, not the value of the last expression. " +
	"Variables, imports and files persist between calls within this response. " +
	"Use /mnt/data (or /tmp) for scratch files; they are discarded afterwards."

const codeDescription = "The Python 3.13 source code to run."

// functionTool is the rewritten tool, rendered once per Interceptor.
type functionTool struct {
	json string
}

func newFunctionTool(name string) functionTool {
	params := `{"type":"object","properties":{"code":{"type":"string","description":` + jsonString(codeDescription) +
		`}},"required":["code"],"additionalProperties":false}`
	return functionTool{json: string(appendEditedObject(nil, `{}`,
		set("type", `"function"`),
		set("name", jsonString(name)),
		set("description", jsonString(toolDescription)),
		set("parameters", params),
		set("strict", "true"),
	))}
}

func newInterceptor(cfg Config, provider sandbox.Provider, log *zap.Logger) (*Interceptor, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("interceptor: invalid config: %w", err)
	}
	if provider == nil {
		return nil, errors.New("interceptor: nil sandbox provider")
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Interceptor{cfg: cfg, provider: provider, log: log, fn: newFunctionTool(cfg.FunctionName)}, nil
}
