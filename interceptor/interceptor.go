package interceptor

import (
	"errors"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/sandbox"
)

// toolDescription tells the model what the function gives it, from what
// the running provider reports: it mirrors what OpenAI's hosted tool offers,
// minus what this sandbox lacks.
func toolDescription(env sandbox.Environment) string {
	version := env.PythonVersion
	if version == "" {
		version = "3"
	}
	d := "Runs Python " + version + " code in a sandboxed interpreter and returns its stdout, stderr and a status line. "
	if len(env.Packages) == 0 {
		d += "Only the Python standard library is available (no third-party packages such as numpy or pandas) and there is no network access. "
	} else {
		d += "Besides the standard library these packages can be imported: " + strings.Join(env.Packages, ", ") + ". " +
			"Nothing else can be installed and there is no network access. "
	}
	d += "Print what you need to see: only printed output is returned, not the value of the last expression. " +
		"Variables, imports and files persist between calls within this response. "
	if env.Images {
		d += "Files are in /mnt/data (/tmp for scratch); they are discarded afterwards. " +
			"Matplotlib figures still open when a call ends (plt.show() included) are shown to the user as images."
	} else {
		d += "Use /mnt/data (or /tmp) for scratch files; they are discarded afterwards."
	}
	return d
}

// functionTool is the rewritten tool, rendered once per Interceptor.
type functionTool struct {
	json string
}

// newFunctionTool renders the tool for the provider's environment.
func newFunctionTool(name string, env sandbox.Environment) functionTool {
	version := env.PythonVersion
	if version == "" {
		version = "3"
	}
	params := `{"type":"object","properties":{"code":{"type":"string","description":` +
		jsonx.Quote("The Python "+version+" source code to run.") +
		`}},"required":["code"],"additionalProperties":false}`
	return functionTool{json: string(jsonx.AppendEditedObject(nil, `{}`,
		jsonx.Set("type", `"function"`),
		jsonx.Set("name", jsonx.Quote(name)),
		jsonx.Set("description", jsonx.Quote(toolDescription(env))),
		jsonx.Set("parameters", params),
		jsonx.Set("strict", "true"),
	))}
}

// New validates cfg (after WithDefaults) and builds an Interceptor. log may
// be nil (no logging).
func New(cfg Config, provider sandbox.Provider, log *zap.Logger, opts ...Option) (*Interceptor, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("interceptor: invalid config: %w", err)
	}
	if provider == nil {
		return nil, errors.New("interceptor: nil sandbox provider")
	}
	if log == nil {
		log = zap.NewNop()
	}
	i := &Interceptor{cfg: cfg, provider: provider, log: log, fn: newFunctionTool(cfg.FunctionName, provider.Environment())}
	for _, o := range opts {
		o(i)
	}
	return i, nil
}
