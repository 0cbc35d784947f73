package interceptor

import (
	"context"

	"github.com/codeinterp/codeinterp/internal/processor"
)

// The types the filter and the interceptor share are package processor's.
type (
	// Caller is who sent a request.
	Caller = processor.Caller
	// Result is what the client gets for an intercepted exchange.
	Result = processor.Result
	// Upstream performs one follow-up inference (the filter builds one per
	// HTTP exchange, with the client's auth headers). err is for transport
	// failures only; a non-2xx answer is a status, not an error.
	Upstream = processor.Upstream
	// UpstreamFunc adapts a function to Upstream.
	UpstreamFunc = processor.UpstreamFunc
	// StreamUpstream performs one follow-up inference of a live stream
	// ("stream": true); the caller (StreamResponse) closes the body, which
	// must end when ctx does.
	StreamUpstream = processor.StreamUpstream
	// StreamUpstreamFunc adapts a function to StreamUpstream.
	StreamUpstreamFunc = processor.StreamUpstreamFunc
)

// The content types of a Result.
const (
	ContentTypeJSON = processor.ContentTypeJSON
	ContentTypeSSE  = processor.ContentTypeSSE
)

var (
	_ processor.Exchange     = (*Exchange)(nil)
	_ processor.Backgrounded = (*Exchange)(nil)
)

// Processor is ic as the filter sees it: the /v1/responses endpoint's
// processor.
func (ic *Interceptor) Processor() processor.Processor { return responsesProcessor{ic} }

type responsesProcessor struct{ ic *Interceptor }

func (p responsesProcessor) PassesThrough(body []byte) bool { return p.ic.PassesThrough(body) }

func (p responsesProcessor) NewExchange(ctx context.Context, c processor.Caller, body []byte) (processor.Exchange, error) {
	x, err := p.ic.NewExchange(ctx, c, body)
	if x == nil {
		return nil, err // not a typed nil in the interface
	}
	return x, err
}
