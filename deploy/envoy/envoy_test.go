package envoy

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"sigs.k8s.io/yaml"

	"github.com/codeinterp/codeinterp/internal/config"
	"github.com/codeinterp/codeinterp/internal/filter"
)

const (
	envoyFile = "envoy.yaml"
	// The key Envoy looks up for upstream HTTP protocol options.
	httpProtocolOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
)

// loadBootstrap parses a bootstrap the way `envoy -c` does for a YAML file
// (YAML → JSON → proto, unknown fields rejected, every Any resolved) and
// runs the protoc-gen-validate rules on it and on every message packed in
// an Any (ValidateAll does not look inside Anys by itself).
func loadBootstrap(data []byte) (*bootstrapv3.Bootstrap, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("yaml: %w", err)
	}
	b := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(js, b); err != nil {
		return nil, fmt.Errorf("proto: %w", err)
	}
	if err := validateDeep(b); err != nil {
		return nil, err
	}
	return b, nil
}

type validatorAll interface{ ValidateAll() error }

// validateDeep runs ValidateAll on m and on every message packed in an Any
// anywhere below it.
func validateDeep(m proto.Message) error {
	var errs []error
	if v, ok := m.(validatorAll); ok {
		if err := v.ValidateAll(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.ProtoReflect().Descriptor().FullName(), err))
		}
	}
	var walk func(protoreflect.Message)
	walk = func(rm protoreflect.Message) {
		if a, ok := rm.Interface().(*anypb.Any); ok {
			inner, err := a.UnmarshalNew()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", a.GetTypeUrl(), err))
				return
			}
			if err := validateDeep(inner); err != nil {
				errs = append(errs, err)
			}
			return
		}
		rm.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.IsList() && fd.Message() != nil:
				for i := range v.List().Len() {
					walk(v.List().Get(i).Message())
				}
			case fd.IsMap() && fd.MapValue().Message() != nil:
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					walk(mv.Message())
					return true
				})
			case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
				walk(v.Message())
			}
			return true
		})
	}
	walk(m.ProtoReflect())
	return errors.Join(errs...)
}

func unpack[T proto.Message](a *anypb.Any) (T, bool) {
	var zero T
	if a == nil {
		return zero, false
	}
	m, err := a.UnmarshalNew()
	if err != nil {
		return zero, false
	}
	t, ok := m.(T)
	return t, ok
}

// hcms returns the HTTP connection managers of a listener.
func hcms(l *listenerv3.Listener) []*hcmv3.HttpConnectionManager {
	var out []*hcmv3.HttpConnectionManager
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			if h, ok := unpack[*hcmv3.HttpConnectionManager](f.GetTypedConfig()); ok {
				out = append(out, h)
			}
		}
	}
	return out
}

type extProcFilter struct {
	name string
	cfg  *extprocv3.ExternalProcessor
}

func extProcFilters(h *hcmv3.HttpConnectionManager) []extProcFilter {
	var out []extProcFilter
	for _, f := range h.GetHttpFilters() {
		if e, ok := unpack[*extprocv3.ExternalProcessor](f.GetTypedConfig()); ok {
			out = append(out, extProcFilter{f.GetName(), e})
		}
	}
	return out
}

// firstRoute returns the route Envoy would pick for a path: the first whose
// path or prefix matches. Other matchers are not expected in envoy.yaml.
func firstRoute(vh *routev3.VirtualHost, path string) (*routev3.Route, error) {
	for _, r := range vh.GetRoutes() {
		m := r.GetMatch()
		switch ps := m.GetPathSpecifier().(type) {
		case *routev3.RouteMatch_Path:
			if ps.Path == path {
				return r, nil
			}
		case *routev3.RouteMatch_Prefix:
			if strings.HasPrefix(path, ps.Prefix) {
				return r, nil
			}
		case *routev3.RouteMatch_PathSeparatedPrefix:
			if rest, ok := strings.CutPrefix(path, ps.PathSeparatedPrefix); ok && (rest == "" || rest[0] == '/') {
				return r, nil
			}
		default:
			return nil, fmt.Errorf("route %q: matcher %T is not understood by this test", r.GetName(), ps)
		}
	}
	return nil, fmt.Errorf("no route for %s", path)
}

func extProcDisabled(r *routev3.Route, vh *routev3.VirtualHost, filterName string) bool {
	for _, m := range []map[string]*anypb.Any{r.GetTypedPerFilterConfig(), vh.GetTypedPerFilterConfig()} {
		if pr, ok := unpack[*extprocv3.ExtProcPerRoute](m[filterName]); ok {
			return pr.GetDisabled()
		}
	}
	return false
}

func dur(d *durationpb.Duration) time.Duration { return d.AsDuration() }

func u32(v *wrapperspb.UInt32Value) uint64 {
	if v == nil {
		return 1 << 20 // Envoy's default per_connection_buffer_limit_bytes
	}
	return uint64(v.GetValue())
}

func endpointAddrs(c *clusterv3.Cluster) []string {
	var out []string
	for _, e := range c.GetLoadAssignment().GetEndpoints() {
		for _, lb := range e.GetLbEndpoints() {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue()))))
		}
	}
	return out
}

func listenerAddr(l *listenerv3.Listener) string {
	sa := l.GetAddress().GetSocketAddress()
	return net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue())))
}

// checkBootstrap asserts what codeinterp needs from the Envoy configuration,
// paired with the server configuration c. Every finding is returned.
func checkBootstrap(b *bootstrapv3.Bootstrap, c *config.Config) error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	clusters := map[string]*clusterv3.Cluster{}
	for _, cl := range b.GetStaticResources().GetClusters() {
		clusters[cl.GetName()] = cl
	}
	refCluster := func(where, name string) {
		if clusters[name] == nil {
			fail("%s: references cluster %q, which is not defined", where, name)
		}
	}

	up, err := url.Parse(c.Upstream.URL)
	if err != nil {
		return err
	}
	var public, followup []*listenerv3.Listener
	for _, l := range b.GetStaticResources().GetListeners() {
		hasExtProc := false
		for _, h := range hcms(l) {
			if len(extProcFilters(h)) > 0 {
				hasExtProc = true
			}
			for _, vh := range h.GetRouteConfig().GetVirtualHosts() {
				for _, r := range vh.GetRoutes() {
					if cl := r.GetRoute().GetCluster(); cl != "" {
						refCluster(fmt.Sprintf("listener %s route %s", l.GetName(), r.GetName()), cl)
					}
				}
			}
		}
		if hasExtProc {
			public = append(public, l)
		}
		if listenerAddr(l) == up.Host {
			followup = append(followup, l)
		}
	}

	// The public listener: ext_proc on the Responses route only.
	if len(public) != 1 {
		fail("want exactly one listener with the ext_proc filter, found %d", len(public))
	}
	for _, l := range public {
		if lim := u32(l.GetPerConnectionBufferLimitBytes()); lim <= 1<<20 || lim < uint64(c.Server.MaxBodyBytes) {
			fail("listener %s: per_connection_buffer_limit_bytes %d must exceed 1MiB and be >= server.max_body_bytes %d",
				l.GetName(), lim, c.Server.MaxBodyBytes)
		}
		for _, h := range hcms(l) {
			eps := extProcFilters(h)
			if len(eps) == 0 {
				continue
			}
			filters := h.GetHttpFilters()
			if last := filters[len(filters)-1].GetName(); last != "envoy.filters.http.router" {
				fail("listener %s: the router must be the last HTTP filter, not %s", l.GetName(), last)
			}
			if len(eps) != 1 {
				fail("listener %s: %d ext_proc filters, want 1", l.GetName(), len(eps))
			}
			ep := eps[0]
			e := ep.cfg
			pm := e.GetProcessingMode()
			if pm.GetRequestHeaderMode() != extprocv3.ProcessingMode_SEND || pm.GetResponseHeaderMode() != extprocv3.ProcessingMode_SEND {
				fail("ext_proc: request and response headers must be SEND")
			}
			if pm.GetRequestBodyMode() != extprocv3.ProcessingMode_BUFFERED || pm.GetResponseBodyMode() != extprocv3.ProcessingMode_BUFFERED {
				fail("ext_proc: request and response bodies must be BUFFERED, got %s/%s", pm.GetRequestBodyMode(), pm.GetResponseBodyMode())
			}
			if pm.GetRequestTrailerMode() == extprocv3.ProcessingMode_SEND || pm.GetResponseTrailerMode() == extprocv3.ProcessingMode_SEND {
				fail("ext_proc: trailers must be SKIP")
			}
			if !e.GetAllowModeOverride() {
				fail("ext_proc: allow_mode_override must be true (pass-through uses mode_override)")
			}
			if allowed := e.GetAllowedOverrideModes(); len(allowed) > 0 {
				// Envoy applies an override only if the merged mode is
				// listed; the server sends these two (the duplex one for
				// every selected request unless streams are synthetic).
				sent := map[string]*extprocv3.ProcessingMode{"let-go": filter.LetGoMode()}
				if c.Interceptor.Streaming != "synthetic" {
					sent["FULL_DUPLEX_STREAMED"] = filter.DuplexMode()
				}
				for name, o := range sent {
					if m := mergedOverride(pm, o); !slices.ContainsFunc(allowed, func(a *extprocv3.ProcessingMode) bool { return sameMode(a, m) }) {
						fail("ext_proc: allowed_override_modes lacks the %s override the server sends (merged: %v)", name, m)
					}
				}
			}
			if e.GetFailureModeAllow() {
				fail("ext_proc: failure_mode_allow must be false")
			}
			if e.GetObservabilityMode() {
				fail("ext_proc: observability_mode ignores every response")
			}
			mt := 200 * time.Millisecond
			if e.GetMessageTimeout() != nil {
				mt = dur(e.GetMessageTimeout())
			}
			if mt < time.Second || mt < c.Sandbox.QueueWait {
				fail("ext_proc: message_timeout %s must be >= 1s and >= sandbox.queue_wait %s", mt, c.Sandbox.QueueWait)
			}
			maxMT := dur(e.GetMaxMessageTimeout())
			if c.Server.OverrideMessageTimeout > 0 && maxMT < c.Server.OverrideMessageTimeout {
				fail("ext_proc: max_message_timeout %s < server.override_message_timeout %s: Envoy would ignore the override",
					maxMT, c.Server.OverrideMessageTimeout)
			}
			gcl := e.GetGrpcService().GetEnvoyGrpc().GetClusterName()
			if gcl == "" {
				fail("ext_proc: grpc_service must use envoy_grpc with a cluster")
			} else {
				refCluster("ext_proc grpc_service", gcl)
			}
			if cl := clusters[gcl]; cl != nil {
				po, ok := unpack[*upstreamhttpv3.HttpProtocolOptions](cl.GetTypedExtensionProtocolOptions()[httpProtocolOptionsKey])
				if !ok || po.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
					fail("cluster %s: gRPC needs explicit http2_protocol_options in %s", gcl, httpProtocolOptionsKey)
				}
				if addrs := endpointAddrs(cl); len(addrs) != 1 || addrs[0] != c.Server.Listen {
					fail("cluster %s: endpoints %v, want the server's listen address %s", gcl, addrs, c.Server.Listen)
				}
				hasGRPCHealth := false
				for _, hc := range cl.GetHealthChecks() {
					if hc.GetGrpcHealthCheck() != nil {
						hasGRPCHealth = true
					}
				}
				if !hasGRPCHealth {
					fail("cluster %s: want a grpc_health_check (the server serves grpc.health.v1)", gcl)
				}
			}
			streamIdle := 5 * time.Minute
			if h.GetStreamIdleTimeout() != nil {
				streamIdle = dur(h.GetStreamIdleTimeout())
			}
			for _, vh := range h.GetRouteConfig().GetVirtualHosts() {
				for _, p := range append(slices.Clone(c.Routes.Paths), c.Routes.MessagesPaths...) {
					r, err := firstRoute(vh, p)
					if err != nil {
						fail("virtual host %s: %v", vh.GetName(), err)
						continue
					}
					if extProcDisabled(r, vh, ep.name) {
						fail("route %s for %s: ext_proc is disabled", r.GetName(), p)
					}
					if lim := r.GetRequestBodyBufferLimit(); lim != nil && lim.GetValue() < uint64(c.Server.MaxBodyBytes) {
						fail("route %s: request_body_buffer_limit %d < server.max_body_bytes", r.GetName(), lim.GetValue())
					}
					idle := streamIdle
					if it := r.GetRoute().GetIdleTimeout(); it != nil {
						idle = dur(it)
					}
					if idle != 0 && idle < maxMT {
						fail("route %s: idle timeout %s < max_message_timeout %s: the loop would be cut", r.GetName(), idle, maxMT)
					}
				}
				// Everything else must not open an ext_proc stream at all.
				for _, p := range []string{"/v1/models", "/v1/chat/completions", "/v1/responses/resp_123", "/v1/responses/resp_123/input_items", "/v1/responses/resp_123/cancel", "/health"} {
					r, err := firstRoute(vh, p)
					if err != nil {
						continue // not routed at all: no ext_proc either
					}
					if !extProcDisabled(r, vh, ep.name) {
						fail("route %s for %s: ext_proc must be disabled (per-route disabled: true)", r.GetName(), p)
					}
				}
				checkAPIRoutes(vh, ep.name, clusters, c, fail)
			}
		}
	}

	// The follow-up listener: where upstream.url points, without ext_proc.
	if len(followup) != 1 {
		fail("want exactly one listener at upstream.url's address %s, found %d", up.Host, len(followup))
	}
	for _, l := range followup {
		if ip := net.ParseIP(l.GetAddress().GetSocketAddress().GetAddress()); ip == nil || !ip.IsLoopback() {
			fail("listener %s: follow-up listener must bind loopback only", l.GetName())
		}
		for _, h := range hcms(l) {
			if len(extProcFilters(h)) > 0 {
				fail("listener %s: the follow-up listener must not have the ext_proc filter", l.GetName())
			}
			for _, vh := range h.GetRouteConfig().GetVirtualHosts() {
				r, err := firstRoute(vh, up.Path)
				if err != nil {
					fail("listener %s: %v", l.GetName(), err)
					continue
				}
				if t := r.GetRoute().GetTimeout(); t != nil && dur(t) != 0 && dur(t) < c.Upstream.Timeout {
					fail("listener %s: route timeout %s < upstream.timeout %s", l.GetName(), dur(t), c.Upstream.Timeout)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// apiPaths are requests of OpenAI's Containers and Files APIs.
var (
	containerPaths = []string{"/v1/containers", "/v1/containers/cntr_1", "/v1/containers/cntr_1/files", "/v1/containers/cntr_1/files/cfile_1/content",
		"/v1/skills", "/v1/skills/skill_1", "/v1/skills/skill_1/versions/2/content"}
	filePaths = []string{"/v1/files", "/v1/files/file-1", "/v1/files/file-1/content"}
)

// checkAPIRoutes: /v1/containers (and /v1/files unless files.source is
// upstream) reach the cluster at api.listen with the ext_proc filter
// disabled; look-alike paths and, with files.source: upstream, /v1/files
// do not.
func checkAPIRoutes(vh *routev3.VirtualHost, filterName string, clusters map[string]*clusterv3.Cluster, c *config.Config, fail func(string, ...any)) {
	toAPI := func(r *routev3.Route) bool {
		cl := clusters[r.GetRoute().GetCluster()]
		addrs := endpointAddrs(cl)
		return cl != nil && len(addrs) == 1 && addrs[0] == c.API.Listen
	}
	want := slices.Clone(containerPaths)
	if c.Files.Source != config.FilesUpstream {
		want = append(want, filePaths...)
	}
	for _, p := range want {
		r, err := firstRoute(vh, p)
		switch {
		case err != nil:
			fail("virtual host %s: %v (the Containers and Files API)", vh.GetName(), err)
		case !toAPI(r):
			fail("route %s for %s: cluster %s is not the server's api.listen %s", r.GetName(), p, r.GetRoute().GetCluster(), c.API.Listen)
		case !extProcDisabled(r, vh, filterName):
			fail("route %s for %s: ext_proc must be disabled (the API is plain HTTP)", r.GetName(), p)
		}
	}
	notAPI := []string{"/v1/containersx", "/v1/filesystem", "/v1/skillsx", "/v1/responses", "/v1/models"}
	if c.Files.Source == config.FilesUpstream {
		notAPI = append(notAPI, filePaths...)
	}
	for _, p := range notAPI {
		if r, err := firstRoute(vh, p); err == nil && toAPI(r) {
			fail("route %s for %s goes to the API (api.listen %s); it must not", r.GetName(), p, c.API.Listen)
		}
	}
}

func readEnvoy(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(envoyFile)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// mergedOverride is Envoy's effectiveModeOverride: the override over the
// filter-level mode, an unset body mode meaning NONE.
func mergedOverride(filterLevel, o *extprocv3.ProcessingMode) *extprocv3.ProcessingMode {
	m := proto.Clone(filterLevel).(*extprocv3.ProcessingMode)
	if o.GetResponseHeaderMode() != extprocv3.ProcessingMode_DEFAULT {
		m.ResponseHeaderMode = o.GetResponseHeaderMode()
	}
	m.RequestBodyMode, m.ResponseBodyMode = o.GetRequestBodyMode(), o.GetResponseBodyMode()
	if o.GetRequestTrailerMode() != extprocv3.ProcessingMode_DEFAULT {
		m.RequestTrailerMode = o.GetRequestTrailerMode()
	}
	if o.GetResponseTrailerMode() != extprocv3.ProcessingMode_DEFAULT {
		m.ResponseTrailerMode = o.GetResponseTrailerMode()
	}
	return m
}

// sameMode compares modes as allowed_override_modes does (request_header_mode aside).
func sameMode(a, b *extprocv3.ProcessingMode) bool {
	return a.GetResponseHeaderMode() == b.GetResponseHeaderMode() && a.GetRequestBodyMode() == b.GetRequestBodyMode() &&
		a.GetResponseBodyMode() == b.GetResponseBodyMode() && a.GetRequestTrailerMode() == b.GetRequestTrailerMode() &&
		a.GetResponseTrailerMode() == b.GetResponseTrailerMode()
}

func TestEnvoyBootstrap(t *testing.T) {
	b, err := loadBootstrap(readEnvoy(t))
	if err != nil {
		t.Fatalf("envoy.yaml does not load:\n%v", err)
	}
	if err := checkBootstrap(b, config.Default()); err != nil {
		t.Fatalf("envoy.yaml does not fit codeinterp:\n%v", err)
	}
	// The walk really reached the packed filters (not a vacuous pass).
	var n int
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, h := range hcms(l) {
			n += len(extProcFilters(h))
		}
	}
	if n != 1 {
		t.Fatalf("found %d ext_proc filters, want 1", n)
	}
}

// The commented-out OpenAI cluster must be a valid drop-in replacement.
func TestEnvoyOpenAIVariant(t *testing.T) {
	data := string(readEnvoy(t))
	start := strings.Index(data, "\n  # - name: llm\n") + 1
	if start == 0 {
		t.Fatal("commented OpenAI cluster not found")
	}
	var block []string
	for _, line := range strings.SplitAfter(data[start:], "\n") {
		if !strings.HasPrefix(line, "  # ") {
			break
		}
		block = append(block, "  "+strings.TrimPrefix(line, "  # "))
	}
	// Replace the vLLM cluster (from "  - name: llm" to the next "  - name:"
	// or comment block) with the uncommented one.
	i := strings.Index(data, "\n  - name: llm\n") + 1
	j := strings.Index(data[i:], "\n  #")
	if i == 0 || j < 0 {
		t.Fatal("vLLM cluster not found")
	}
	variant := data[:i] + strings.Join(block, "") + data[i+j+1:]
	variant = regexp.MustCompile(`(?m)^(\s+)cluster: llm$`).ReplaceAllString(variant, "${1}cluster: llm\n${1}auto_host_rewrite: true")
	b, err := loadBootstrap([]byte(variant))
	if err != nil {
		t.Fatalf("OpenAI variant does not load:\n%v\n%s", err, variant)
	}
	var llm *clusterv3.Cluster
	for _, cl := range b.GetStaticResources().GetClusters() {
		if cl.GetName() == "llm" {
			llm = cl
		}
	}
	if llm == nil || llm.GetTransportSocket() == nil || llm.GetType() != clusterv3.Cluster_LOGICAL_DNS {
		t.Fatalf("variant's llm cluster is not the TLS one: %v", llm)
	}
	if err := checkBootstrap(b, config.Default()); err != nil {
		t.Fatalf("OpenAI variant does not fit codeinterp:\n%v", err)
	}
}

// Configurations Envoy would reject, or that would break codeinterp, must
// fail the same checks.
func TestEnvoyBootstrapBroken(t *testing.T) {
	textCases := []struct {
		name, old, new, want string
	}{
		{"unknown field", "allow_mode_override: true", "allow_mode_overide: true", "unknown field"},
		{"bad enum", "response_body_mode: BUFFERED", "response_body_mode: BUFFER", "BUFFER"},
		{"message_timeout above Envoy's range", "message_timeout: 10s", "message_timeout: 7200s", "MessageTimeout"},
		{"empty stat_prefix", "stat_prefix: public", `stat_prefix: ""`, "StatPrefix"},
		{"duplicate key", "codec_type: AUTO\n          route_config:\n            name: public",
			"codec_type: AUTO\n          codec_type: AUTO\n          route_config:\n            name: public", `key "codec_type" already set`},
		{"unknown typed config", "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router", "type.googleapis.com/envoy.extensions.filters.http.nope.v3.Nope", "nope"},
	}
	for _, tt := range textCases {
		t.Run(tt.name, func(t *testing.T) {
			data := string(readEnvoy(t))
			if !strings.Contains(data, tt.old) {
				t.Fatalf("envoy.yaml no longer contains %q; update the test", tt.old)
			}
			_, err := loadBootstrap([]byte(strings.Replace(data, tt.old, tt.new, 1)))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tt.want)
			}
		})
	}

	find := func(b *bootstrapv3.Bootstrap, name string) *listenerv3.Listener {
		for _, l := range b.GetStaticResources().GetListeners() {
			if l.GetName() == name {
				return l
			}
		}
		t.Fatalf("listener %s not found", name)
		return nil
	}
	// edit unpacks the public listener's HCM and ext_proc config, lets the
	// case change them, and packs them back.
	edit := func(b *bootstrapv3.Bootstrap, listener string, fn func(*hcmv3.HttpConnectionManager)) {
		f := find(b, listener).GetFilterChains()[0].GetFilters()[0]
		h, ok := unpack[*hcmv3.HttpConnectionManager](f.GetTypedConfig())
		if !ok {
			t.Fatal("no HCM")
		}
		fn(h)
		a, err := anypb.New(h)
		if err != nil {
			t.Fatal(err)
		}
		f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: a}
	}
	editExtProc := func(b *bootstrapv3.Bootstrap, fn func(*extprocv3.ExternalProcessor)) {
		edit(b, "public", func(h *hcmv3.HttpConnectionManager) {
			for _, f := range h.GetHttpFilters() {
				if e, ok := unpack[*extprocv3.ExternalProcessor](f.GetTypedConfig()); ok {
					fn(e)
					a, err := anypb.New(e)
					if err != nil {
						t.Fatal(err)
					}
					f.ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: a}
				}
			}
		})
	}
	cases := []struct {
		name   string
		mutate func(*bootstrapv3.Bootstrap)
		want   string
	}{
		{"ext_proc cluster missing", func(b *bootstrapv3.Bootstrap) {
			var keep []*clusterv3.Cluster
			for _, cl := range b.GetStaticResources().GetClusters() {
				if cl.GetName() != "codeinterp_ext_proc" {
					keep = append(keep, cl)
				}
			}
			b.StaticResources.Clusters = keep
		}, `references cluster "codeinterp_ext_proc", which is not defined`},
		{"llm cluster missing", func(b *bootstrapv3.Bootstrap) {
			b.StaticResources.Clusters = b.StaticResources.Clusters[1:]
		}, `references cluster "llm"`},
		{"grpc cluster on HTTP/1.1", func(b *bootstrapv3.Bootstrap) {
			for _, cl := range b.GetStaticResources().GetClusters() {
				delete(cl.TypedExtensionProtocolOptions, httpProtocolOptionsKey)
			}
		}, "explicit http2_protocol_options"},
		{"streamed response body", func(b *bootstrapv3.Bootstrap) {
			editExtProc(b, func(e *extprocv3.ExternalProcessor) {
				e.ProcessingMode.ResponseBodyMode = extprocv3.ProcessingMode_STREAMED
			})
		}, "bodies must be BUFFERED"},
		{"trailers sent", func(b *bootstrapv3.Bootstrap) {
			editExtProc(b, func(e *extprocv3.ExternalProcessor) {
				e.ProcessingMode.ResponseTrailerMode = extprocv3.ProcessingMode_SEND
			})
		}, "trailers must be SKIP"},
		{"allowed override modes without the duplex one", func(b *bootstrapv3.Bootstrap) {
			editExtProc(b, func(e *extprocv3.ExternalProcessor) {
				e.AllowedOverrideModes = []*extprocv3.ProcessingMode{mergedOverride(e.ProcessingMode, filter.LetGoMode())}
			})
		}, "allowed_override_modes lacks the FULL_DUPLEX_STREAMED override"},
		{"allowed override modes without the let-go one", func(b *bootstrapv3.Bootstrap) {
			editExtProc(b, func(e *extprocv3.ExternalProcessor) {
				e.AllowedOverrideModes = []*extprocv3.ProcessingMode{mergedOverride(e.ProcessingMode, filter.DuplexMode())}
			})
		}, "allowed_override_modes lacks the let-go override"},
		{"mode override off", func(b *bootstrapv3.Bootstrap) {
			editExtProc(b, func(e *extprocv3.ExternalProcessor) { e.AllowModeOverride = false })
		}, "allow_mode_override must be true"},
		{"fail open", func(b *bootstrapv3.Bootstrap) {
			editExtProc(b, func(e *extprocv3.ExternalProcessor) { e.FailureModeAllow = true })
		}, "failure_mode_allow must be false"},
		{"default message timeout", func(b *bootstrapv3.Bootstrap) {
			editExtProc(b, func(e *extprocv3.ExternalProcessor) { e.MessageTimeout = nil })
		}, "message_timeout 200ms must be >= 1s"},
		{"max_message_timeout below the override", func(b *bootstrapv3.Bootstrap) {
			editExtProc(b, func(e *extprocv3.ExternalProcessor) { e.MaxMessageTimeout = durationpb.New(5 * time.Minute) })
		}, "max_message_timeout 5m0s < server.override_message_timeout 10m0s"},
		{"no max_message_timeout", func(b *bootstrapv3.Bootstrap) {
			editExtProc(b, func(e *extprocv3.ExternalProcessor) { e.MaxMessageTimeout = nil })
		}, "Envoy would ignore the override"},
		{"default buffer limit", func(b *bootstrapv3.Bootstrap) {
			find(b, "public").PerConnectionBufferLimitBytes = nil
		}, "per_connection_buffer_limit_bytes 1048576 must exceed 1MiB"},
		{"route buffer limit too small", func(b *bootstrapv3.Bootstrap) {
			edit(b, "public", func(h *hcmv3.HttpConnectionManager) {
				h.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].RequestBodyBufferLimit = wrapperspb.UInt64(1 << 20)
			})
		}, "request_body_buffer_limit 1048576"},
		{"idle timeout cuts the loop", func(b *bootstrapv3.Bootstrap) {
			edit(b, "public", func(h *hcmv3.HttpConnectionManager) {
				h.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute().IdleTimeout = nil
			})
		}, "idle timeout 5m0s < max_message_timeout"},
		{"ext_proc on every route", func(b *bootstrapv3.Bootstrap) {
			edit(b, "public", func(h *hcmv3.HttpConnectionManager) {
				for _, r := range h.GetRouteConfig().GetVirtualHosts()[0].GetRoutes() {
					r.TypedPerFilterConfig = nil
				}
			})
		}, "for /v1/models: ext_proc must be disabled"},
		{"ext_proc disabled on the Responses route", func(b *bootstrapv3.Bootstrap) {
			edit(b, "public", func(h *hcmv3.HttpConnectionManager) {
				rs := h.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()
				rs[0].TypedPerFilterConfig = rs[2].TypedPerFilterConfig // the containers route's
			})
		}, "route responses for /v1/responses: ext_proc is disabled"},
		{"ext_proc on the follow-up listener", func(b *bootstrapv3.Bootstrap) {
			var epFilter *hcmv3.HttpFilter
			edit(b, "public", func(h *hcmv3.HttpConnectionManager) { epFilter = h.GetHttpFilters()[0] })
			edit(b, "followup", func(h *hcmv3.HttpConnectionManager) {
				h.HttpFilters = append([]*hcmv3.HttpFilter{epFilter}, h.HttpFilters...)
			})
		}, "want exactly one listener with the ext_proc filter, found 2"},
		{"follow-up listener moved", func(b *bootstrapv3.Bootstrap) {
			find(b, "followup").GetAddress().GetSocketAddress().PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: 10002}
		}, "want exactly one listener at upstream.url's address 127.0.0.1:10001, found 0"},
		{"follow-up listener public", func(b *bootstrapv3.Bootstrap) {
			find(b, "followup").GetAddress().GetSocketAddress().Address = "0.0.0.0"
		}, "want exactly one listener at upstream.url's address"},
		{"server address differs", func(b *bootstrapv3.Bootstrap) {
			for _, cl := range b.GetStaticResources().GetClusters() {
				if cl.GetName() == "codeinterp_ext_proc" {
					cl.LoadAssignment.Endpoints[0].LbEndpoints[0].GetEndpoint().Address.GetSocketAddress().PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: 50052}
				}
			}
		}, "want the server's listen address 127.0.0.1:50051"},
		{"API cluster missing", func(b *bootstrapv3.Bootstrap) {
			b.StaticResources.Clusters = slices.DeleteFunc(b.StaticResources.Clusters, func(cl *clusterv3.Cluster) bool { return cl.GetName() == "codeinterp_api" })
		}, `references cluster "codeinterp_api", which is not defined`},
		{"API on another port", func(b *bootstrapv3.Bootstrap) {
			for _, cl := range b.GetStaticResources().GetClusters() {
				if cl.GetName() == "codeinterp_api" {
					cl.LoadAssignment.Endpoints[0].LbEndpoints[0].GetEndpoint().Address.GetSocketAddress().PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: 8082}
				}
			}
		}, "for /v1/containers: cluster codeinterp_api is not the server's api.listen 127.0.0.1:8081"},
		{"API route behind ext_proc", func(b *bootstrapv3.Bootstrap) {
			edit(b, "public", func(h *hcmv3.HttpConnectionManager) {
				for _, r := range h.GetRouteConfig().GetVirtualHosts()[0].GetRoutes() {
					if r.GetName() == "files" {
						r.TypedPerFilterConfig = nil
					}
				}
			})
		}, "route files for /v1/files: ext_proc must be disabled"},
		{"files route missing", func(b *bootstrapv3.Bootstrap) {
			edit(b, "public", func(h *hcmv3.HttpConnectionManager) {
				vh := h.GetRouteConfig().GetVirtualHosts()[0]
				vh.Routes = slices.DeleteFunc(vh.Routes, func(r *routev3.Route) bool { return r.GetName() == "files" })
			})
		}, "route passthrough for /v1/files: cluster llm is not the server's api.listen"},
		{"API route as a string prefix", func(b *bootstrapv3.Bootstrap) {
			edit(b, "public", func(h *hcmv3.HttpConnectionManager) {
				for _, r := range h.GetRouteConfig().GetVirtualHosts()[0].GetRoutes() {
					if r.GetName() == "files" {
						r.Match.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: "/v1/files"}
					}
				}
			})
		}, "route files for /v1/filesystem goes to the API"},
		{"router not last", func(b *bootstrapv3.Bootstrap) {
			edit(b, "public", func(h *hcmv3.HttpConnectionManager) {
				fs := h.GetHttpFilters()
				fs[0], fs[1] = fs[1], fs[0]
			})
		}, "the router must be the last HTTP filter"},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			b, err := loadBootstrap(readEnvoy(t))
			if err != nil {
				t.Fatal(err)
			}
			tt.mutate(b)
			err = validateDeep(b)
			if err == nil {
				err = checkBootstrap(b, config.Default())
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v\nwant one containing %q", err, tt.want)
			}
		})
	}
}

// The server's documented defaults and this file must stay paired even
// when someone edits one side: a server override beyond Envoy's bound fails.
func TestEnvoyPairsWithServerConfig(t *testing.T) {
	b, err := loadBootstrap(readEnvoy(t))
	if err != nil {
		t.Fatal(err)
	}
	c := config.Default()
	c.Server.OverrideMessageTimeout = 20 * time.Minute
	if err := checkBootstrap(b, c); err == nil || !strings.Contains(err.Error(), "max_message_timeout 15m0s < server.override_message_timeout 20m0s") {
		t.Fatalf("err = %v", err)
	}
	c = config.Default()
	c.Server.MaxBodyBytes = 64 * config.MiB
	if err := checkBootstrap(b, c); err == nil || !strings.Contains(err.Error(), ">= server.max_body_bytes") {
		t.Fatalf("err = %v", err)
	}
	c = config.Default()
	c.API.Listen = "127.0.0.1:9999"
	if err := checkBootstrap(b, c); err == nil || !strings.Contains(err.Error(), "is not the server's api.listen 127.0.0.1:9999") {
		t.Fatalf("err = %v", err)
	}
	// files.source: upstream needs /v1/files to reach the model provider.
	c = config.Default()
	c.Files.Source, c.Files.UpstreamURL = config.FilesUpstream, "https://api.openai.com/v1"
	if err := checkBootstrap(b, c); err == nil || !strings.Contains(err.Error(), "route files for /v1/files goes to the API") {
		t.Fatalf("err = %v", err)
	}
	c = config.Default()
	c.Routes.Paths = append(c.Routes.Paths, "/openai/v1/responses")
	if err := checkBootstrap(b, c); err == nil || !strings.Contains(err.Error(), "for /openai/v1/responses: ext_proc is disabled") {
		t.Fatalf("err = %v", err)
	}
}

// The files.source: upstream variant the comments describe (delete the
// "files" route) fits a server with that setting.
func TestEnvoyFilesUpstreamVariant(t *testing.T) {
	data := string(readEnvoy(t))
	i := strings.Index(data, "              # files.source: local (the default) or off.")
	j := strings.Index(data, "              # Everything else")
	if i < 0 || j < i {
		t.Fatal("the files route block is not where the test expects it")
	}
	b, err := loadBootstrap([]byte(data[:i] + data[j:]))
	if err != nil {
		t.Fatal(err)
	}
	c := config.Default()
	c.Files.Source, c.Files.UpstreamURL = config.FilesUpstream, "https://api.openai.com/v1"
	if err := checkBootstrap(b, c); err != nil {
		t.Fatalf("the upstream-files variant does not fit files.source: upstream:\n%v", err)
	}
	if err := checkBootstrap(b, config.Default()); err == nil || !strings.Contains(err.Error(), "for /v1/files: cluster llm") {
		t.Fatalf("the upstream-files variant fits files.source: local: %v", err)
	}
}
