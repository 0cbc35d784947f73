package interceptor

import (
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/codeinterpreter"
	"github.com/codeinterp/codeinterp/internal/netpolicy"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/telemetry"
)

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
	env := provider.Environment()
	ci := ciTool{codeinterpreter.Tool{Fn: cfg.FunctionName}}
	i := &Interceptor{cfg: cfg, provider: provider, log: log, ci: ci, tools: []tool{ci, shellTool{}},
		plain: map[string]string{}, network: netpolicy.Gate{Provider: env.Provider}}
	for _, t := range i.tools {
		i.plain[t.Name()] = t.Function(env, nil)
	}
	for _, o := range opts {
		o(i)
	}
	if i.tel == nil {
		i.tel = telemetry.Off()
	}
	i.tracer = i.tel.Tracer("interceptor")
	return i, nil
}
