package filter

import (
	"go.opentelemetry.io/otel/trace"

	"github.com/codeinterp/codeinterp/internal/telemetry"

	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/codeinterp/codeinterp/internal/processor"
	"github.com/codeinterp/codeinterp/internal/store"
)

// Config is the filter's part of the operator configuration.
type Config struct {
	// Paths are the exact :path values handled (query ignored). Default
	// ["/v1/responses"].
	Paths []string
	// Methods are the methods handled on those paths. Default ["POST"].
	Methods []string
	// MaxBodyBytes bounds request and upstream response bodies; keep it
	// equal to Envoy's buffer limit. Default 16 MiB.
	MaxBodyBytes int64
	// OverrideMessageTimeout is sent as override_message_timeout before
	// the loop runs; it must not exceed Envoy's max_message_timeout or
	// Envoy ignores it. Zero sends none.
	OverrideMessageTimeout time.Duration
	// Upstream is where follow-ups go.
	Upstream UpstreamConfig
	// SyntheticStreams keeps BUFFERED response bodies for every request
	// and answers "stream": true with the synthetic stream made after the
	// loop (interceptor.streaming: synthetic). By default an intercepted
	// stream is live: every selected request is answered with a
	// FULL_DUPLEX_STREAMED response-body override (docs/streaming.md).
	SyntheticStreams bool
	// AuthHeaders name the request headers whose values identify the
	// caller (store.Owner): its containers and files are its own. Default
	// store.DefaultAuthHeaders.
	AuthHeaders []string
	// Telemetry traces the streams and the model rounds the server makes;
	// nil: off.
	Telemetry *telemetry.Telemetry
	// Background runs requests that ask for "background": true; nil
	// answers them with a 400.
	Background processor.BackgroundRunner
	// Routes are endpoints of other processors (another protocol) beside
	// Paths, each with its own upstream URL and error shape.
	Routes []Route
	// AnonymousShared lets requests without a credential share one owner
	// (api.anonymous: shared); otherwise such a request that uses the code
	// interpreter's containers gets OpenAI's 401.
	AnonymousShared bool
}

// DefaultMaxBodyBytes is the default body limit.
const DefaultMaxBodyBytes = 16 << 20

// DefaultPaths are the paths handled unless configured otherwise: OpenAI's
// Responses API. A fresh slice each call.
func DefaultPaths() []string { return []string{"/v1/responses"} }

// DefaultMethods are the methods handled on those paths unless configured
// otherwise. A fresh slice each call.
func DefaultMethods() []string { return []string{http.MethodPost} }

func (c Config) withDefaults() Config {
	if len(c.Paths) == 0 {
		c.Paths = DefaultPaths()
	}
	if len(c.Methods) == 0 {
		c.Methods = DefaultMethods()
	}
	if len(c.AuthHeaders) == 0 {
		c.AuthHeaders = store.DefaultAuthHeaders()
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.Upstream.ForwardHeaders == nil {
		c.Upstream.ForwardHeaders = DefaultForwardHeaders()
	}
	return c
}

// Server is the ext_proc gRPC service.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer

	cfg     Config
	proc    processor.Processor
	metrics *Metrics
	log     *zap.Logger
	client  *http.Client
	routes  map[string]*route // by path: the main processor's Paths and Config.Routes
	methods map[string]bool
	forward []string

	tel          *telemetry.Telemetry
	tracer       trace.Tracer
	upstreamHost string

	streams sync.WaitGroup
}

// New builds the service over proc, the endpoint's processor (the
// interceptor's, for /v1/responses). metrics and log may be nil.
func New(cfg Config, proc processor.Processor, metrics *Metrics, log *zap.Logger) (*Server, error) {
	if proc == nil {
		return nil, errors.New("filter: a processor is required")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Upstream.validate(); err != nil {
		return nil, fmt.Errorf("filter: %w", err)
	}
	if cfg.MaxBodyBytes < 0 || cfg.OverrideMessageTimeout < 0 {
		return nil, errors.New("filter: max body bytes and override message timeout must not be negative")
	}
	if log == nil {
		log = zap.NewNop()
	}
	s := &Server{cfg: cfg, proc: proc, metrics: metrics, log: log, client: cfg.Upstream.Client,
		routes: map[string]*route{}, methods: map[string]bool{}, tel: cfg.Telemetry}
	if s.tel == nil {
		s.tel = telemetry.Off()
	}
	s.tracer = s.tel.Tracer("filter")
	if u, err := url.Parse(cfg.Upstream.URL); err == nil {
		s.upstreamHost = u.Hostname()
	}
	for _, m := range cfg.Methods {
		s.methods[strings.ToUpper(m)] = true
	}
	for _, h := range cfg.Upstream.ForwardHeaders {
		s.forward = append(s.forward, strings.ToLower(h))
	}
	main := &route{name: "responses", proc: proc, url: cfg.Upstream.URL, host: s.upstreamHost, forward: s.forward, main: true}
	for _, p := range cfg.Paths {
		s.routes[p] = main
	}
	if err := s.addRoutes(cfg.Routes); err != nil {
		return nil, fmt.Errorf("filter: %w", err)
	}
	if s.client == nil {
		s.client = &http.Client{Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        256,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
			ForceAttemptHTTP2:   true,
		},
			// Follow-ups go to the operator's URL and nowhere else: a
			// redirect is answered as it stands (a non-2xx the client then
			// sees), never followed with the client's credentials.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return s, nil
}

// Process serves one ext_proc stream: one HTTP request through Envoy.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	s.streams.Add(1)
	defer s.streams.Done()
	if s.metrics != nil {
		s.metrics.ActiveStreams.Inc()
		defer s.metrics.ActiveStreams.Dec()
	}
	st := newStreamState(s)
	err := st.run(stream)
	st.finish(err)
	return err
}

// Wait blocks until every open stream has ended or ctx is done. A graceful
// gRPC stop already drains streams; this is for callers that need to know.
func (s *Server) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { s.streams.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// protocolError ends a stream whose message order or content breaks the
// ext_proc contract; Envoy answers the client with status_on_error.
func protocolError(format string, args ...any) error {
	return status.Errorf(codes.FailedPrecondition, "codeinterp ext_proc: "+format, args...)
}

// isStreamEnd reports errors that mean Envoy (or the client) is gone.
func isStreamEnd(ctx context.Context, err error) bool {
	if errors.Is(err, io.EOF) || ctx.Err() != nil {
		return true
	}
	switch status.Code(err) {
	case codes.Canceled, codes.DeadlineExceeded:
		return true
	}
	return false
}
