package processor

import (
	"context"
	"io"
	"net/http"
	"time"
)

// Processor is an endpoint's logic behind the filter.
type Processor interface {
	// PassesThrough reports, cheaply, that a request body needs nothing
	// of the processor: the filter lets it and its answer through.
	PassesThrough(body []byte) bool
	// NewExchange reads a request body for caller and returns its
	// exchange; an error is the client's answer (an OpenAI error).
	NewExchange(ctx context.Context, caller Caller, body []byte) (Exchange, error)
}

// Exchange is one request as a processor handles it.
type Exchange interface {
	// Intercepted reports whether the processor handles the answer too;
	// Modified whether the request body sent upstream differs from the
	// client's, which UpstreamBody is.
	Intercepted() bool
	Modified() bool
	UpstreamBody() []byte
	// StreamLive makes an intercepted streaming exchange live (the
	// upstream's stream goes to StreamResponse); Live reports it.
	StreamLive() bool
	Live() bool
	// StreamHead is the status and headers the client gets for a live
	// stream whose upstream answered status and header.
	StreamHead(status int, header http.Header) (int, http.Header)
	// StreamResponse writes a live stream's events to w, making the
	// follow-ups through up.
	StreamResponse(ctx context.Context, up StreamUpstream, status int, header http.Header, body io.Reader, w io.Writer) error
	// CompleteResponse turns the upstream's whole answer into the
	// client's, making the follow-ups through up.
	CompleteResponse(ctx context.Context, up Upstream, status int, header http.Header, body []byte) (*Result, error)
	// Close releases what the exchange holds (its container).
	Close()
}

// Caller is who sent a request.
type Caller struct {
	// Owner is the caller's identity (store.Owner of its credential); ""
	// for a request without a credential that may not have containers
	// (api.anonymous: reject): it gets OpenAI's 401 when it uses them.
	Owner string
	// Header is the request's headers, for a Containers implementation
	// that fetches file_ids from the upstream's Files API with the
	// caller's own credential.
	Header http.Header
}

// Result is what the client gets for an intercepted exchange.
type Result struct {
	Status      int    // HTTP status for the client
	ContentType string // ContentTypeJSON or ContentTypeSSE (or the upstream's own for a passed-through answer)
	Body        []byte
	// Rounds is the number of follow-up inferences made.
	Rounds int
	// ToolCalls is the number of code calls the model made (run or not).
	ToolCalls int
}

// The content types of a Result.
const (
	ContentTypeJSON = "application/json"
	ContentTypeSSE  = "text/event-stream; charset=utf-8"
)

// Upstream performs one follow-up inference: it POSTs body to the model's
// /v1/responses and returns the whole answer.
type Upstream interface {
	CreateResponse(ctx context.Context, body []byte) (status int, header http.Header, respBody []byte, err error)
}

// UpstreamFunc adapts a function to Upstream.
type UpstreamFunc func(ctx context.Context, body []byte) (int, http.Header, []byte, error)

// CreateResponse calls f.
func (f UpstreamFunc) CreateResponse(ctx context.Context, body []byte) (int, http.Header, []byte, error) {
	return f(ctx, body)
}

// StreamUpstream performs one follow-up inference of a live stream: it
// POSTs body and returns the upstream's answer as it arrives.
type StreamUpstream interface {
	CreateResponseStream(ctx context.Context, body []byte) (status int, header http.Header, respBody io.ReadCloser, err error)
}

// StreamUpstreamFunc adapts a function to StreamUpstream.
type StreamUpstreamFunc func(ctx context.Context, body []byte) (int, http.Header, io.ReadCloser, error)

// CreateResponseStream calls f.
func (f StreamUpstreamFunc) CreateResponseStream(ctx context.Context, body []byte) (int, http.Header, io.ReadCloser, error) {
	return f(ctx, body)
}

// Backgrounded is an Exchange that may ask to run in the background
// (`"background": true`): detached from the client's connection, driven by
// a BackgroundRunner, its client answered at once.
type Backgrounded interface {
	Exchange
	// Background reports the request asked for it.
	Background() bool
	// ResponseID is the id the response has (its record's).
	ResponseID() string
	// ClientStream reports the client asked for a stream.
	ClientStream() bool
	// QueuedResponse is the Response object with status and no output.
	QueuedResponse(status string, createdAt time.Time) []byte
}

// A BackgroundRunner drives background exchanges to their end, detached
// from the client: the first inference and every follow-up through up.
type BackgroundRunner interface {
	// Reserve takes one of owner's background slots before the request's
	// exchange is made (which may open a container), so that a request
	// past the bounds costs nothing; an error is the client's answer.
	Reserve(owner string) (Reservation, error)
	// Start takes ex and the reservation over (it closes and releases
	// them) and returns the Response object the client gets at once
	// (status "queued"); an error is the client's answer (an OpenAI error)
	// and nothing was started. ctx is the request's: the run outlives it,
	// and keeps only its trace (the run's spans join the request's trace).
	Start(ctx context.Context, caller Caller, ex Backgrounded, up Upstreams, rsv Reservation) (queued []byte, err error)
}

// A Reservation is a background slot held for a request being read.
type Reservation interface {
	// Release gives the slot back (idempotent).
	Release()
}

// Upstreams is a model server reached both ways.
type Upstreams interface {
	Upstream
	StreamUpstream
}
