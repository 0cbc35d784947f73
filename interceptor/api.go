package interceptor

// This file fixes the contract between the interceptor and its callers (the
// ext_proc filter, the dev proxy, tests). The implementation may add to it but
// must keep these names and meanings.

import (
	"context"
	"net/http"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/containers"
	"github.com/codeinterp/codeinterp/memlimit"
	"github.com/codeinterp/codeinterp/sandbox"
	"github.com/codeinterp/codeinterp/store"
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

// Validate reports every invalid field, by name.
func (c Config) Validate() error { return c.validate() }

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

// Interceptor holds the operator's configuration and the sandbox provider.
// It is safe for concurrent use; each HTTP exchange gets its own Exchange.
type Interceptor struct {
	cfg        Config
	provider   sandbox.Provider
	containers Containers      // nil: a fresh session per response
	responses  store.Responses // nil: responses are not kept (WithResponses)
	// conversations keeps OpenAI's Conversations (WithConversations).
	conversations store.Conversations
	log           *zap.Logger
	fn            functionTool // the rewritten tool, pre-rendered
}

// Option configures an Interceptor beyond its Config.
type Option func(*Interceptor)

// WithContainers makes responses run in OpenAI-style containers kept by c
// (container ids, file_ids, input files, file citations); see NewExchange.
func WithContainers(c Containers) Option { return func(i *Interceptor) { i.containers = c } }

// New validates cfg (after WithDefaults) and builds an Interceptor. log may
// be nil (no logging).
func New(cfg Config, provider sandbox.Provider, log *zap.Logger, opts ...Option) (*Interceptor, error) {
	i, err := newInterceptor(cfg, provider, log)
	if err != nil {
		return nil, err
	}
	for _, o := range opts {
		o(i)
	}
	return i, nil
}

// Config returns the effective configuration (defaults applied).
func (i *Interceptor) Config() Config { return i.cfg }

// RewriteRequest inspects a client's /v1/responses request body. Without a
// native code_interpreter tool (and without replayed code_interpreter_call
// items) the Exchange is a pass-through: !Intercepted() && !Modified(), found
// without parsing the whole body. Otherwise it validates the tool and returns
// the upstream body: the tool replaced by a function tool, tool_choice and
// replayed history rewritten, stream forced to false. A refused request gives
// an *apierror.Error (HTTP 400 with param naming the field, or 413) and no Exchange.
func (i *Interceptor) RewriteRequest(body []byte) (*Exchange, error) {
	return i.rewriteRequest(body)
}

// Exchange is one client request and, when intercepted, its agentic loop.
// RewriteRequest makes it; the filter sends UpstreamBody upstream when
// Modified (else the client's body unchanged) and, when Intercepted, hands
// the upstream's answer to CompleteResponse once. Not safe for concurrent use.
type Exchange struct {
	ic  *Interceptor
	req request
	ctr containers.Container // the response's container (NewExchange with Containers)
	// owner is the caller's owner hash (NewExchange): sessions of one
	// owner may share an interpreter process (sandbox.sessions_per_worker).
	owner string
	// respID is the response's id of ours ("resp_…"; "" without a
	// response store: the model server's id is shown), hist what history
	// resolution did to the request.
	respID string
	hist   history
}

// Close releases the exchange's container when the exchange ends without
// CompleteResponse (the upstream failed, the client left). It is safe to
// call more than once.
func (x *Exchange) Close() {
	if x.ctr != nil {
		_ = x.ctr.Close()
	}
}

// Intercepted reports whether the request carries a native code_interpreter
// tool, so the upstream's response must go through CompleteResponse.
func (x *Exchange) Intercepted() bool { return x.req.intercepted }

// Modified reports whether UpstreamBody differs from the client's body. It
// is true when Intercepted, and also when only replayed code_interpreter_call
// history items were rewritten (no tool in this request: the response then
// passes through untouched).
func (x *Exchange) Modified() bool { return x.req.modified }

// UpstreamBody is the body to send upstream: the rewritten one when Modified,
// else the client's own (so always sending it is correct).
func (x *Exchange) UpstreamBody() []byte { return x.req.upstream }

// ClientStream reports whether an intercepted request asked for
// stream:true: the upstream gets stream:false and CompleteResponse answers
// with synthetic SSE (ContentTypeSSE, status 200). It is false when not
// Intercepted (a stream then passes through untouched).
func (x *Exchange) ClientStream() bool { return x.req.clientStream }

// CompleteResponse takes the upstream's answer to UpstreamBody and runs the
// loop: it executes the model's calls of our function in one sandbox session,
// sends follow-ups through up, and splices the rounds into one OpenAI-shaped
// response (JSON, or synthetic SSE when ClientStream).
//
// A non-2xx first answer passes through unchanged (status, content type,
// body), also for a streaming client. Later failures (a follow-up answered
// non-2xx: that status and body; a transport failure or an unusable upstream
// body: 502 with an OpenAI-shaped error) reach a streaming client as one SSE
// "error" event with status 200, since its stream has begun. The returned
// error is non-nil only when ctx ended (the client went away): the filter
// should then abandon the exchange. When !Intercepted the answer passes
// through unchanged.
func (x *Exchange) CompleteResponse(ctx context.Context, up Upstream, status int, header http.Header, body []byte) (*Result, error) {
	return x.completeResponse(ctx, up, status, header, body)
}

// The content types of the bodies CompleteResponse produces, as OpenAI sends them.
const (
	ContentTypeJSON = "application/json"
	ContentTypeSSE  = "text/event-stream; charset=utf-8"
)
