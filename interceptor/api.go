package interceptor

// This file fixes the contract between the interceptor and its callers (the
// ext_proc filter, the dev proxy, tests). The implementation may add to it but
// must keep these names and meanings.

import (
	"context"
	"net/http"
)

// Upstream performs one follow-up inference: it POSTs a Responses-API
// request body to the operator's configured upstream and returns the HTTP
// status, headers and body. The filter builds one per HTTP exchange so it can
// carry the client's auth headers. err is for transport failures only; a
// non-2xx answer is a status, not an error.
type Upstream interface {
	CreateResponse(ctx context.Context, body []byte) (status int, header http.Header, respBody []byte, err error)
}

// UpstreamFunc adapts a function to Upstream.
type UpstreamFunc func(ctx context.Context, body []byte) (int, http.Header, []byte, error)

// CreateResponse calls f.
func (f UpstreamFunc) CreateResponse(ctx context.Context, body []byte) (int, http.Header, []byte, error) {
	return f(ctx, body)
}
