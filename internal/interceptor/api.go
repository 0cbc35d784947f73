package interceptor

// This file fixes the contract between the interceptor and its callers (the
// ext_proc filter, the dev proxy, tests): the types they hold. The
// implementation may add to it but must keep these names and meanings. The
// methods that do the work are declared with their bodies, where the work
// is: New in interceptor.go, RewriteRequest in request.go, CompleteResponse
// in loop.go, NewExchange in files.go, the live path's in live.go, and
// Config's in config.go.

import (
	"go.opentelemetry.io/otel/trace"

	"github.com/codeinterp/codeinterp/internal/telemetry"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/containerapi"
	"github.com/codeinterp/codeinterp/internal/netpolicy"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/store"
)

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
	// tools are the hosted tools this server serves (code_interpreter
	// first), and plain their functions without a network policy,
	// pre-rendered by tool name.
	tools []tool
	ci    tool
	plain map[string]string
	// network is what a network_policy may ask of this server (WithNetwork).
	network netpolicy.Gate
	// tel traces the code runs (WithTelemetry); off by default.
	tel    *telemetry.Telemetry
	tracer trace.Tracer
	// usage accounts runs (WithUsage); nil: not accounted.
	usage store.Usage
}

// WithUsage accounts each code run to its owner (runs and their time).
func WithUsage(u store.Usage) Option { return func(i *Interceptor) { i.usage = u } }

// WithTelemetry traces each code run as a GenAI execute_tool span.
func WithTelemetry(t *telemetry.Telemetry) Option { return func(i *Interceptor) { i.tel = t } }

// Option configures an Interceptor beyond its Config.
type Option func(*Interceptor)

// WithContainers makes responses run in OpenAI-style containers kept by c
// (container ids, file_ids, input files, file citations); see NewExchange.
func WithContainers(c Containers) Option { return func(i *Interceptor) { i.containers = c } }

// WithNetwork accepts network_policy allowlists on the code_interpreter
// tool's auto container, bounded by c (the egress proxy), when the
// provider can give sandboxes a network (sandbox.Environment.Network).
// Without it, or on a provider without sockets, any policy but
// {"type": "disabled"} is a 400 saying why.
func WithNetwork(c netpolicy.Checker) Option {
	return func(i *Interceptor) {
		if i.provider.Environment().Network {
			i.network.Checker = c
		}
	}
}

// Config returns the effective configuration (defaults applied).
func (i *Interceptor) Config() Config { return i.cfg }

// Exchange is one client request and, when intercepted, its agentic loop.
// RewriteRequest makes it; the filter sends UpstreamBody upstream when
// Modified (else the client's body unchanged) and, when Intercepted, hands
// the upstream's answer to CompleteResponse once. Not safe for concurrent use.
type Exchange struct {
	ic  *Interceptor
	req request
	ctr containerapi.Container // the response's container (NewExchange with Containers)
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

// The content types of the bodies CompleteResponse produces, as OpenAI sends them.
