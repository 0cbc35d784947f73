package devproxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
)

// Envoy's defaults: message_timeout, the listener's
// per_connection_buffer_limit_bytes (which bounds buffered bodies in both
// directions) and status_on_error.
const (
	DefaultMessageTimeout = 200 * time.Millisecond
	DefaultBufferLimit    = 1 << 20
	defaultStatusOnError  = http.StatusInternalServerError
)

// Config is the emulated listener, route and ext_proc filter configuration.
type Config struct {
	// Upstream is the cluster requests are forwarded to: scheme and host,
	// plus an optional path prefix that is prepended to the request path.
	// It is the default route: a request that no entry of Routes matches
	// goes here, through the ext_proc filter.
	Upstream *url.URL
	// Routes is the route table ahead of the default route, in Envoy's
	// order: the first route whose match fits the request's path (query
	// excluded) is taken. Like Envoy, the route is chosen from the
	// client's :path when the request arrives; a processor's :path
	// mutation changes the path sent, not the route — unless its response
	// sets clear_route_cache (with a header_mutation), which picks the
	// route anew from the mutated :path.
	Routes []Route
	// Processor is the ext_proc gRPC client. nil runs the proxy without the
	// filter (a plain route), which benchmarks use as the baseline.
	Processor extprocv3.ExternalProcessorClient
	// ProcessingMode is the filter-level mode. nil means the mode codeinterp
	// is deployed with: headers SEND, bodies BUFFERED, trailers SKIP.
	ProcessingMode *filterv3.ProcessingMode
	// MessageTimeout is the per-message timer; zero means Envoy's 200ms.
	MessageTimeout time.Duration
	// MaxMessageTimeout bounds override_message_timeout; zero disables
	// overrides, as in Envoy.
	MaxMessageTimeout time.Duration
	// AllowModeOverride honours mode_override in headers responses. Envoy
	// ignores every override when a filter-level body mode is
	// FULL_DUPLEX_STREAMED.
	AllowModeOverride bool
	// AllowContentLengthHeader is Envoy's allow_content_length_header:
	// keep content-length in a FULL_DUPLEX_STREAMED response, which
	// otherwise loses it.
	AllowContentLengthHeader bool
	// StreamIdleTimeout is the HCM stream_idle_timeout: the only timer of
	// a FULL_DUPLEX_STREAMED response. Zero means Envoy's 5 minutes.
	StreamIdleTimeout time.Duration
	// DuplicateEndOfStream re-delivers the final end-of-stream body chunk
	// of a FULL_DUPLEX_STREAMED response, as Envoy 1.35–1.37 do for large
	// bodies (about 1 MB or more; envoyproxy/envoy#46237). Tests turn it on
	// to check that the processor ignores the second one.
	DuplicateEndOfStream bool
	// AllowedOverrideModes, when non-empty, lists the only merged modes an
	// override may produce.
	AllowedOverrideModes []*filterv3.ProcessingMode
	// FailureModeAllow continues unprocessed after a stream failure.
	FailureModeAllow bool
	// StatusOnError is the local reply status for stream failures; zero
	// means 500.
	StatusOnError int
	// DisallowIsError turns disallowed header mutations into local replies.
	DisallowIsError bool
	// BufferLimit is the listener's per-connection buffer limit; zero
	// means 1 MiB.
	BufferLimit int64
	// Transport forwards to the upstream; nil means a transport that, like
	// Envoy, never adds or strips content encodings.
	Transport http.RoundTripper
	// Logger receives one line per local reply; nil discards.
	Logger *zap.Logger
	// OnLocalReply, when set, is told about every reply the proxy generates
	// itself (status and Envoy's response code details). Tests use it.
	OnLocalReply func(status int, details string)
}

// Route is one entry of the route table: an Envoy RouteMatch (exactly one
// of Path, Prefix and PathSeparatedPrefix) and its cluster.
type Route struct {
	Name string
	// Path matches the path exactly; Prefix matches any path starting with
	// it; PathSeparatedPrefix matches the prefix itself or the prefix
	// followed by "/" (Envoy's path_separated_prefix, which is also what
	// Envoy Gateway makes of an HTTPRoute PathPrefix).
	Path, Prefix, PathSeparatedPrefix string
	// Cluster is where the route forwards: scheme and host, plus an
	// optional path prefix (as Config.Upstream).
	Cluster *url.URL
	// ExtProcDisabled is ExtProcPerRoute{disabled: true}: the request opens
	// no ext_proc stream at all.
	ExtProcDisabled bool
}

func (rt Route) matches(path string) bool {
	switch {
	case rt.Path != "":
		return path == rt.Path
	case rt.Prefix != "":
		return strings.HasPrefix(path, rt.Prefix)
	default:
		rest, ok := strings.CutPrefix(path, rt.PathSeparatedPrefix)
		return ok && (rest == "" || rest[0] == '/')
	}
}

func checkRoute(rt Route) error {
	n := 0
	for _, m := range []string{rt.Path, rt.Prefix, rt.PathSeparatedPrefix} {
		if m != "" {
			n++
			if m[0] != '/' {
				return fmt.Errorf("route %q: match %q must start with /", rt.Name, m)
			}
		}
	}
	if n != 1 {
		return fmt.Errorf("route %q: want exactly one of Path, Prefix, PathSeparatedPrefix", rt.Name)
	}
	if sp := rt.PathSeparatedPrefix; len(sp) > 1 && strings.HasSuffix(sp, "/") {
		return fmt.Errorf("route %q: path_separated_prefix %q must not end with /", rt.Name, sp)
	}
	if c := rt.Cluster; c == nil || c.Host == "" || (c.Scheme != "http" && c.Scheme != "https") {
		return fmt.Errorf("route %q: Cluster must be an absolute http(s) URL", rt.Name)
	}
	return nil
}

// route picks the route for a request path: the first of Routes that
// matches, else the default route (Upstream, with the filter).
func (p *Proxy) route(path string) Route {
	for _, rt := range p.cfg.Routes {
		if rt.matches(path) {
			return rt
		}
	}
	return Route{Name: "default", Prefix: "/", Cluster: p.cfg.Upstream}
}

// Proxy is an http.Handler that forwards to Config.Upstream through the
// ext_proc filter emulation.
type Proxy struct {
	cfg       Config
	mode      *filterv3.ProcessingMode
	transport http.RoundTripper
	log       *zap.Logger
	rejected  atomic.Int64
}

// New checks cfg and returns a proxy.
func New(cfg Config) (*Proxy, error) {
	if cfg.Upstream == nil || cfg.Upstream.Host == "" || (cfg.Upstream.Scheme != "http" && cfg.Upstream.Scheme != "https") {
		return nil, errors.New("devproxy: Upstream must be an absolute http(s) URL")
	}
	mode := cfg.ProcessingMode
	if mode == nil {
		mode = &filterv3.ProcessingMode{
			RequestHeaderMode:   filterv3.ProcessingMode_SEND,
			ResponseHeaderMode:  filterv3.ProcessingMode_SEND,
			RequestBodyMode:     filterv3.ProcessingMode_BUFFERED,
			ResponseBodyMode:    filterv3.ProcessingMode_BUFFERED,
			RequestTrailerMode:  filterv3.ProcessingMode_SKIP,
			ResponseTrailerMode: filterv3.ProcessingMode_SKIP,
		}
	}
	for _, rt := range cfg.Routes {
		if err := checkRoute(rt); err != nil {
			return nil, fmt.Errorf("devproxy: %w", err)
		}
	}
	mode = proto.Clone(mode).(*filterv3.ProcessingMode)
	if err := checkDuplex(mode); err != nil {
		return nil, fmt.Errorf("devproxy: processing mode: %w", err)
	}
	if err := supportedMode(mode); err != nil {
		return nil, fmt.Errorf("devproxy: processing mode: %w", err)
	}
	if cfg.MessageTimeout < 0 || cfg.MaxMessageTimeout < 0 || cfg.BufferLimit < 0 || cfg.StreamIdleTimeout < 0 {
		return nil, errors.New("devproxy: timeouts and buffer limit must not be negative")
	}
	if cfg.MessageTimeout == 0 {
		cfg.MessageTimeout = DefaultMessageTimeout
	}
	if cfg.BufferLimit == 0 {
		cfg.BufferLimit = DefaultBufferLimit
	}
	if cfg.StreamIdleTimeout == 0 {
		cfg.StreamIdleTimeout = DefaultStreamIdleTimeout
	}
	if cfg.StatusOnError == 0 {
		cfg.StatusOnError = defaultStatusOnError
	}
	if cfg.StatusOnError < 400 || cfg.StatusOnError > 599 {
		return nil, errors.New("devproxy: StatusOnError must be a 4xx or 5xx status")
	}
	p := &Proxy{cfg: cfg, mode: mode, transport: cfg.Transport, log: cfg.Logger}
	if p.transport == nil {
		p.transport = &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        256,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true, // pass bodies through exactly as the upstream sent them
			ForceAttemptHTTP2:   true,
		}
	}
	if p.log == nil {
		p.log = zap.NewNop()
	}
	return p, nil
}

// RejectedHeaderMutations counts disallowed header edits that were skipped,
// like Envoy's rejected_header_mutations stat.
func (p *Proxy) RejectedHeaderMutations() int64 { return p.rejected.Load() }

// supportedMode reports modes the emulation cannot reproduce faithfully:
// NONE and BUFFERED both ways, and FULL_DUPLEX_STREAMED for responses.
func supportedMode(m *filterv3.ProcessingMode) error {
	if b := m.GetRequestBodyMode(); b != filterv3.ProcessingMode_NONE && b != filterv3.ProcessingMode_BUFFERED {
		return fmt.Errorf("request body mode %s is not emulated (only NONE and BUFFERED)", b)
	}
	switch b := m.GetResponseBodyMode(); b {
	case filterv3.ProcessingMode_NONE, filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
	default:
		return fmt.Errorf("response body mode %s is not emulated (only NONE, BUFFERED and FULL_DUPLEX_STREAMED)", b)
	}
	return nil
}

// ServeHTTP runs one HTTP exchange.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt := p.route(r.URL.Path)
	ex := &exchange{p: p, w: w, r: r, mode: proto.Clone(p.mode).(*filterv3.ProcessingMode), cluster: rt.Cluster}
	if p.cfg.Processor == nil || rt.ExtProcDisabled {
		ex.complete = true
	}
	defer ex.closeStream()
	ex.run(r.Context())
}

// requestHeaders builds the header map the processor sees: after Envoy's
// HCM has turned Host into :authority, added x-forwarded-proto and
// x-request-id and removed hop-by-hop headers, all keys lowercase.
func requestHeaders(r *http.Request) *headerMap {
	m := &headerMap{}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	m.add(":authority", r.Host)
	m.add(":path", r.URL.RequestURI())
	m.add(":method", r.Method)
	m.add(":scheme", scheme)
	rest := fromHTTP(r.Header)
	rest.del("content-length") // re-added below from what the codec framed
	m.h = append(m.h, rest.h...)
	if r.ContentLength > 0 {
		m.add("content-length", fmt.Sprint(r.ContentLength))
	}
	if _, ok := m.get("x-forwarded-proto"); !ok {
		m.add("x-forwarded-proto", scheme)
	}
	if _, ok := m.get("x-request-id"); !ok {
		m.add("x-request-id", newRequestID())
	}
	return m
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// upstreamURL joins the cluster address and the (possibly mutated) :path.
func upstreamURL(cluster *url.URL, path string) (*url.URL, error) {
	ref, err := url.ParseRequestURI(path)
	if err != nil {
		return nil, fmt.Errorf("bad :path %q: %w", path, err)
	}
	u := *cluster
	u.Path = strings.TrimSuffix(u.Path, "/") + ref.Path
	u.RawPath = ""
	u.RawQuery = ref.RawQuery
	return &u, nil
}

func (p *Proxy) messageTimeout() time.Duration { return p.cfg.MessageTimeout }

// contextDone reports whether the client has gone.
func contextDone(ctx context.Context) bool { return ctx.Err() != nil }
