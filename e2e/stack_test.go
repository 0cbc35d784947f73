package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/codeinterp/codeinterp/internal/api"
	"github.com/codeinterp/codeinterp/internal/containers"
	"github.com/codeinterp/codeinterp/internal/devproxy"
	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/filter"
	"github.com/codeinterp/codeinterp/internal/interceptor"
	"github.com/codeinterp/codeinterp/internal/messages"
	"github.com/codeinterp/codeinterp/internal/netpolicy"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/gvisor"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/memory"
	"github.com/codeinterp/codeinterp/internal/telemetry"
)

// stackOptions tune one test's stack.
type stackOptions struct {
	provider string // "wasm" (default) or "gvisor"
	pool     []func(*pool.Config)
	// containers makes the stack keep containers in st (a memory store
	// when nil) and serve the Containers and Files APIs, routed by the
	// front proxy as deploy/envoy routes them.
	containers  bool
	st          store.Store
	interceptor interceptor.Config
	quiet       bool // no per-request logs (benchmarks, load)
	// synthetic keeps interceptor.streaming: synthetic (BUFFERED response
	// bodies); by default streams are live (FULL_DUPLEX_STREAMED).
	synthetic bool
	// eventDelay paces the scripted model's event streams.
	eventDelay time.Duration
	// stateless: the scripted model keeps no responses (model.stateless).
	stateless bool
	// egress gives sessions with a network_policy this proxy (provider
	// gvisor, whose kind kind adjusts: the test CA); nil: no network.
	egress *egress.Proxy
	kind   func(*gvisor.Config)
	// logs, when set, also receives every log line of the stack (JSON).
	logs io.Writer
	// tel traces the stack (nil: off).
	tel *telemetry.Telemetry
	// messages serves Anthropic's Messages API on /v1/messages (needs
	// containers), its follow-ups to the model's /v1/messages.
	messages bool
}

// stack is the whole path: client → devproxy → ext_proc gRPC → filter →
// interceptor → sandbox, with the scripted model behind.
type stack struct {
	model    *model
	st       store.Store
	manager  *containers.Manager
	proxyURL string
	server   *filter.Server
	metrics  *filter.Metrics
	runs     *runRecorder
	client   openai.Client
	// egressUsed records the pool's egress accounting (network stacks).
	egressUsed *egressUsage
}

func newStack(t testing.TB, sh shapes, s script, o stackOptions) *stack {
	t.Helper()
	m := newModel(t, sh, s)
	m.live, m.eventDelay = !o.synthetic, o.eventDelay
	m.stateless = o.stateless
	st := newStackWithUpstream(t, sh, m.URL(), o)
	st.model = m
	return st
}

// newRawUpstream is a model server that answers with handler, for cases
// that are not about the code interpreter.
func newRawUpstream(t testing.TB, handler func(w http.ResponseWriter, r *http.Request, body []byte)) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		handler(w, r, b)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func newStackWithUpstream(t testing.TB, _ shapes, upstream string, o stackOptions) *stack {
	t.Helper()
	log := zaptest.NewLogger(t)
	if o.quiet {
		log = zap.NewNop()
	}
	if o.logs != nil {
		tee := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(o.logs), zapcore.DebugLevel)
		log = zap.New(zapcore.NewTee(log.Core(), tee))
	}
	provider := o.provider
	if provider == "" {
		provider = "wasm"
	}
	var sp sandbox.Provider
	if o.egress != nil {
		sp = sandboxtest.NewGVisorWith(t, o.kind, append(o.pool, func(pc *pool.Config) { pc.Egress = o.egress })...)
	} else {
		sp = sandboxtest.NewProvider(t, provider, o.pool...)
	}
	runs := &runRecorder{Provider: sp, started: make(chan string, 64)}
	reg := prometheus.NewRegistry()
	metrics, err := filter.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	prov, err := metrics.InstrumentProvider(runs)
	if err != nil {
		t.Fatal(err)
	}
	var routes []devproxy.Route
	var st store.Store
	var mgr *containers.Manager
	// As serve has them: responses and conversations kept in process.
	rs := memory.NewResponses(store.DefaultResponseLimits(), nil)
	cs := memory.NewConversations(store.DefaultConversationLimits(), nil)
	icOpts := []interceptor.Option{interceptor.WithResponses(rs), interceptor.WithConversations(cs)}
	gate := netpolicy.Gate{Provider: sp.Environment().Provider}
	if o.egress != nil {
		icOpts = append(icOpts, interceptor.WithNetwork(o.egress))
		gate.Checker = o.egress
	}
	if o.containers {
		st = o.st
		if st == nil {
			ms := memory.New(store.DefaultLimits(), nil)
			t.Cleanup(func() { ms.Close() })
			st = ms
		}
		files, err := api.NewFetcher(api.Config{}, st)
		if err != nil {
			t.Fatal(err)
		}
		// Skills as serve has them: the Skills API and the containers
		// mounting them share one store.
		sk := memory.NewSkills(store.DefaultSkillLimits(), nil)
		mgr = containers.New(containers.Config{Files: files, Skills: sk}, st, prov, log.Named("containers"))
		t.Cleanup(func() { mgr.Close() })
		icOpts = append(icOpts, interceptor.WithContainers(mgr))
		apiSrv, err := api.New(api.Config{Responses: rs, Conversations: cs, Create: mgr.Create, Network: gate, Secrets: mgr, Skills: sk}, st, log.Named("api"))
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(apiSrv)
		t.Cleanup(hs.Close)
		au, _ := url.Parse(hs.URL)
		for _, p := range []string{"/v1/containers", "/v1/files", "/v1/conversations", "/v1/skills"} {
			routes = append(routes, devproxy.Route{Name: p, PathSeparatedPrefix: p, Cluster: au, ExtProcDisabled: true})
		}
		routes = append(routes, devproxy.Route{Name: "stored-responses", Prefix: "/v1/responses/", Cluster: au, ExtProcDisabled: true})
	}
	if o.tel != nil {
		icOpts = append(icOpts, interceptor.WithTelemetry(o.tel))
	}
	ic, err := interceptor.New(o.interceptor, prov, log.Named("interceptor"), icOpts...)
	if err != nil {
		t.Fatal(err)
	}
	var extra []filter.Route
	if o.messages {
		mp, err := messages.New(messages.Config{PingEvery: 500 * time.Millisecond, Environment: prov.Environment()}, mgr, prov.Environment().Shell, log.Named("messages"))
		if err != nil {
			t.Fatal(err)
		}
		extra = append(extra, filter.Route{Name: "messages", Paths: []string{"/v1/messages"}, Processor: mp, UpstreamURL: upstream + "/v1/messages",
			ForwardHeaders: []string{"x-api-key", "anthropic-version"}, ErrorBody: messages.ErrorBody})
	}
	fs, err := filter.New(filter.Config{
		OverrideMessageTimeout: 10 * time.Minute,
		SyntheticStreams:       o.synthetic,
		Upstream:               filter.UpstreamConfig{URL: upstream + "/v1/responses"},
		Telemetry:              o.tel,
		Routes:                 extra,
	}, ic.Processor(), metrics, log.Named("filter"))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(32<<20), grpc.MaxSendMsgSize(32<<20))
	extprocv3.RegisterExternalProcessorServer(gs, fs)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(32<<20), grpc.MaxCallSendMsgSize(32<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	up, _ := url.Parse(upstream)
	// The filter configuration deploy/envoy uses: message_timeout 10s,
	// max_message_timeout 900s, allow_mode_override, 16 MiB buffers.
	px, err := devproxy.New(devproxy.Config{
		Upstream:          up,
		Routes:            routes,
		Processor:         extprocv3.NewExternalProcessorClient(cc),
		MessageTimeout:    10 * time.Second,
		MaxMessageTimeout: 900 * time.Second,
		AllowModeOverride: true,
		BufferLimit:       16 << 20,
		Logger:            log.Named("devproxy"),
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(px)
	t.Cleanup(hs.Close)
	return &stack{
		st: st, manager: mgr,
		proxyURL: hs.URL, server: fs, metrics: metrics, runs: runs,
		client: openai.NewClient(
			option.WithBaseURL(hs.URL+"/v1/"),
			option.WithAPIKey(apiKey),
			option.WithMaxRetries(0), // a retry would hide what the gateway did
			option.WithRequestTimeout(5*time.Minute),
		),
	}
}

// drained waits until every ext_proc stream has ended, so metrics are final.
func (s *stack) drained(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.server.Wait(ctx); err != nil {
		t.Fatalf("ext_proc streams still open: %v", err)
	}
}

func (s *stack) outcome(o filter.Outcome) float64 {
	return testutil.ToFloat64(s.metrics.Requests.WithLabelValues(string(o)))
}

func (s *stack) codeRuns(status string) float64 {
	return testutil.ToFloat64(s.metrics.CodeRuns.WithLabelValues(status))
}

// runRecorder observes the sandbox from outside: when runs start and how
// they end.
type runRecorder struct {
	sandbox.Provider
	started chan string // the code of each run as it starts

	mu      sync.Mutex
	results []sandbox.Result
	ended   []chan sandbox.Result
	opens   []time.Duration // wall time of each Open
	runsDur []time.Duration // wall time of each Run
	closes  []time.Duration // wall time of each session Close
}

// timings returns the Open and Run wall times recorded since the last call.
func (r *runRecorder) timings() (opens, runs, closes []time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	opens, runs, closes = r.opens, r.runsDur, r.closes
	r.opens, r.runsDur, r.closes = nil, nil, nil
	return opens, runs, closes
}

// nextEnd returns a channel that receives the result of the next run to end.
func (r *runRecorder) nextEnd() <-chan sandbox.Result {
	ch := make(chan sandbox.Result, 1)
	r.mu.Lock()
	r.ended = append(r.ended, ch)
	r.mu.Unlock()
	return ch
}

func (r *runRecorder) Open(ctx context.Context, o sandbox.SessionOptions) (sandbox.Session, error) {
	start := time.Now()
	s, err := r.Provider.Open(ctx, o)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.opens = append(r.opens, time.Since(start))
	r.mu.Unlock()
	return &recordedSession{Session: s, r: r}, nil
}

type recordedSession struct {
	sandbox.Session
	r *runRecorder
}

func (s *recordedSession) Close() error {
	start := time.Now()
	err := s.Session.Close()
	s.r.mu.Lock()
	s.r.closes = append(s.r.closes, time.Since(start))
	s.r.mu.Unlock()
	return err
}

func (s *recordedSession) Run(ctx context.Context, code string) (sandbox.Result, error) {
	select {
	case s.r.started <- code:
	default:
	}
	start := time.Now()
	res, err := s.Session.Run(ctx, code)
	d := time.Since(start)
	s.r.mu.Lock()
	s.r.runsDur = append(s.r.runsDur, d)
	s.r.results = append(s.r.results, res)
	for _, ch := range s.r.ended {
		ch <- res
	}
	s.r.ended = nil
	s.r.mu.Unlock()
	return res, err
}

// rawPost sends body to the proxy with the client's headers and returns the
// whole answer.
func rawPost(t *testing.T, proxyURL, body string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, proxyURL+"/v1/responses", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// newHTTPServer serves h on loopback for the test's life and returns its URL.
func newHTTPServer(t testing.TB, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// Shell passes the hosted shell's commands through (the recorder counts
// cells only).
func (s *recordedSession) Shell(ctx context.Context, req sandbox.ShellRequest) (sandbox.Result, error) {
	return sandbox.Shell(ctx, s.Session, req)
}
