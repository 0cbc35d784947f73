package interceptor

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/sandbox"
)

func sprintf(format string, args ...any) string {
	if len(args) == 0 {
		return format
	}
	return fmt.Sprintf(format, args...)
}

// functionTool is the rewritten tool, rendered once per Interceptor.
type functionTool struct {
	json []byte
}

// request is what RewriteRequest learned about one client request.
type request struct {
	intercepted  bool
	modified     bool
	clientStream bool
	upstream     []byte
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
	return &Interceptor{cfg: cfg, provider: provider, log: log}, nil
}

func (i *Interceptor) rewriteRequest(body []byte) (*Exchange, error) {
	return &Exchange{ic: i, req: request{upstream: body}}, nil
}

func (x *Exchange) completeResponse(ctx context.Context, up Upstream, status int, header http.Header, body []byte) (*Result, error) {
	return nil, errors.New("interceptor: not implemented yet")
}
