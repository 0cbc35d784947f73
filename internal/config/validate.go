package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Envoy's range for message_timeout, max_message_timeout and so for
// override_message_timeout (ext_proc.proto: lte 3600s).
const maxEnvoyMessageTimeout = 3600 * time.Second

var (
	// RFC 9110 token characters.
	tokenRE  = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	methodRE = regexp.MustCompile(`^[A-Z]+$`)
)

// Headers that must not be forwarded or set on follow-ups: the HTTP client
// owns framing and routing, and x-codeinterp-* are this server's own.
var reservedHeaders = map[string]string{
	"host":              "the upstream URL decides the host",
	"content-length":    "set from the follow-up body",
	"content-type":      "follow-ups are always application/json",
	"transfer-encoding": "hop-by-hop",
	"connection":        "hop-by-hop",
	"keep-alive":        "hop-by-hop",
	"proxy-connection":  "hop-by-hop",
	"te":                "hop-by-hop",
	"upgrade":           "hop-by-hop",
	"trailer":           "hop-by-hop",
}

// Validate checks every field and returns all problems joined, each a
// *FieldError naming the field path and the reason.
func (c *Config) Validate() error {
	v := &validator{}
	c.validateServer(v)
	c.validateRoutes(v)
	c.validateInterceptor(v)
	c.validateUpstream(v)
	c.validateSandbox(v)
	c.validateAPI(v)
	c.validateStore(v)
	c.validateResponses(v)
	c.validateCheckpoints(v)
	c.validateCluster(v)
	c.validateConversations(v)
	c.validateFiles(v)
	c.validateLogging(v)
	return errors.Join(v.errs...)
}

type validator struct{ errs []error }

func (v *validator) check(ok bool, path, format string, args ...any) {
	if !ok {
		v.add(path, format, args...)
	}
}

func (v *validator) add(path, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{Path: path, Reason: fmt.Sprintf(format, args...)})
}

func checkAddr(v *validator, path, addr string) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		v.add(path, "%q is not host:port (e.g. \"127.0.0.1:50051\" or \":50051\")", addr)
		return
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		v.add(path, "port %q is not a number between 0 and 65535", port)
	}
	if strings.ContainsAny(host, " /") {
		v.add(path, "host %q is not a host name or IP address", host)
	}
}

func (c *Config) validateServer(v *validator) {
	s := c.Server
	if s.Listen == "" {
		v.add("server.listen", "must be set")
	} else {
		checkAddr(v, "server.listen", s.Listen)
	}
	if s.AdminListen != "" {
		checkAddr(v, "server.admin_listen", s.AdminListen)
		// Port 0 (any free port, as in tests) never collides.
		v.check(s.AdminListen != s.Listen || strings.HasSuffix(s.Listen, ":0"), "server.admin_listen", "must differ from server.listen")
	}
	v.check(s.ShutdownTimeout > 0, "server.shutdown_timeout", "must be positive")
	v.check(s.MaxBodyBytes >= 64*KiB && s.MaxBodyBytes <= GiB, "server.max_body_bytes",
		"%s must be between 64KiB and 1GiB", s.MaxBodyBytes)
	o := s.OverrideMessageTimeout
	switch {
	case o == 0:
	case o < time.Millisecond || o > maxEnvoyMessageTimeout:
		v.add("server.override_message_timeout", "%s must be 0 (off) or between 1ms and 1h (Envoy's range)", o)
	default:
		// Envoy honours one override per message, so it must cover at
		// least one round of code plus the follow-up call.
		need := c.Upstream.Timeout + c.Sandbox.Limits.RunTimeout
		v.check(o >= need, "server.override_message_timeout",
			"%s is shorter than one round (sandbox.limits.run_timeout %s + upstream.timeout %s): Envoy would answer 504 mid-loop",
			o, c.Sandbox.Limits.RunTimeout, c.Upstream.Timeout)
	}
}

func (c *Config) validateRoutes(v *validator) {
	r := c.Routes
	v.check(len(r.Paths) > 0, "routes.paths", "must list at least one path")
	seen := map[string]bool{}
	for i, p := range r.Paths {
		path := fmt.Sprintf("routes.paths[%d]", i)
		switch {
		case !strings.HasPrefix(p, "/"):
			v.add(path, "%q must start with /", p)
		case strings.ContainsAny(p, "?# \t"):
			v.add(path, "%q must be a bare path (no query, fragment or spaces)", p)
		case seen[p]:
			v.add(path, "%q is listed twice", p)
		}
		seen[p] = true
	}
	for i, p := range r.MessagesPaths {
		path := fmt.Sprintf("routes.messages_paths[%d]", i)
		switch {
		case !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "?# \t"):
			v.add(path, "%q must be a bare path starting with /", p)
		case seen[p]:
			v.add(path, "%q is also in routes.paths or listed twice", p)
		}
		seen[p] = true
	}
	if _, err := url.Parse(c.Upstream.URL); err == nil && c.Upstream.URL != "" && len(r.MessagesPaths) > 0 && c.Upstream.MessagesUpstream() == "" {
		v.add("upstream.messages_url", "must be set: upstream.url does not end in /responses, so the Messages API's URL cannot be derived from it")
	}
	v.check(len(r.Methods) > 0, "routes.methods", "must list at least one method")
	seenM := map[string]bool{}
	for i, m := range r.Methods {
		path := fmt.Sprintf("routes.methods[%d]", i)
		switch {
		case !methodRE.MatchString(m):
			v.add(path, "%q must be an upper-case HTTP method such as POST (Envoy's :method is case-sensitive)", m)
		case seenM[m]:
			v.add(path, "%q is listed twice", m)
		}
		seenM[m] = true
	}
}

func (c *Config) validateInterceptor(v *validator) {
	// The rest of this section is the interceptor's own Config.Validate's
	// (cmd/extproc's checkOptions): one validator per setting.
	in := c.Interceptor
	v.check(in.MaxMemoryLimit <= c.Sandbox.Limits.MaxGuestMemory, "interceptor.max_memory_limit",
		"%s exceeds sandbox.limits.max_guest_memory %s: the sandbox could not honour it", in.MaxMemoryLimit, c.Sandbox.Limits.MaxGuestMemory)
	switch in.Streaming {
	case "live", "synthetic":
	default:
		v.add("interceptor.streaming", "%q is not one of live, synthetic", in.Streaming)
	}
}

func checkHeaderName(v *validator, path, name string) bool {
	l := strings.ToLower(name)
	switch {
	case !tokenRE.MatchString(name):
		v.add(path, "%q is not a valid header name", name)
	case strings.HasPrefix(l, "x-codeinterp-"):
		v.add(path, "%q: x-codeinterp-* headers are internal to this server", name)
	case reservedHeaders[l] != "":
		v.add(path, "%q cannot be set on follow-ups: %s", name, reservedHeaders[l])
	default:
		return true
	}
	return false
}

func (c *Config) validateUpstream(v *validator) {
	u := c.Upstream
	switch parsed, err := url.Parse(u.URL); {
	case u.URL == "":
		v.add("upstream.url", "must be set (follow-up inference goes only there)")
	case err != nil:
		v.add("upstream.url", "%q is not a URL: %v", u.URL, err)
	case parsed.Scheme != "http" && parsed.Scheme != "https":
		v.add("upstream.url", "%q must be an absolute http:// or https:// URL", u.URL)
	case parsed.Host == "":
		v.add("upstream.url", "%q has no host", u.URL)
	case parsed.User != nil:
		v.add("upstream.url", "must not carry credentials; put them in upstream.headers")
	case parsed.Fragment != "":
		v.add("upstream.url", "%q must not have a #fragment", u.URL)
	}
	if u.MessagesURL != "" {
		if parsed, err := url.Parse(u.MessagesURL); err != nil || (parsed.Scheme != "http" && parsed.Scheme != "https") || parsed.Host == "" || parsed.User != nil {
			v.add("upstream.messages_url", "%q must be an absolute http:// or https:// URL without credentials", u.MessagesURL)
		}
	}
	seen := map[string]bool{}
	for i, h := range u.ForwardHeaders {
		path := fmt.Sprintf("upstream.forward_headers[%d]", i)
		if !checkHeaderName(v, path, h) {
			continue
		}
		l := strings.ToLower(h)
		v.check(!seen[l], path, "%q is listed twice", h)
		seen[l] = true
	}
	lower := map[string]string{}
	for name, val := range u.Headers {
		path := "upstream.headers." + name
		if !checkHeaderName(v, path, name) {
			continue
		}
		if prev, dup := lower[strings.ToLower(name)]; dup {
			v.add(path, "same header as %q (names are case-insensitive)", prev)
		}
		lower[strings.ToLower(name)] = name
		v.check(!strings.ContainsAny(val, "\r\n\x00"), path, "value must not contain CR, LF or NUL")
	}
	v.check(u.Timeout > 0, "upstream.timeout", "must be positive")
}

func (c *Config) validateSandbox(v *validator) {
	// The pool's limits (sandbox.limits.*, max_sessions, warm_workers…)
	// are the pool's own Config.Validate's (cmd/extproc's checkOptions):
	// here only what the pool leaves open.
	s := c.Sandbox
	l := s.Limits
	switch s.Provider {
	case ProviderWASM:
		v.check(l.MaxGuestMemory <= 4*GiB, "sandbox.limits.max_guest_memory", "%s must be at most 4GiB (wasm32)", l.MaxGuestMemory)
		v.check(s.SnapshotDir == "" || strings.HasPrefix(s.SnapshotDir, "/"), "sandbox.snapshot_dir", "%q must be an absolute path", s.SnapshotDir)
		v.check(s.SnapshotRotateSessions >= 0, "sandbox.snapshot_rotate_sessions", "%d must not be negative", s.SnapshotRotateSessions)
		v.check(s.Snapshot || s.SessionsPerWorker == 1, "sandbox.sessions_per_worker", "%d needs sandbox.snapshot: true (a cold-start worker serves one session)", s.SessionsPerWorker)
	case ProviderGVisor:
		g := s.GVisor
		v.check(slices.Contains(GVisorPlatforms, g.Platform), "sandbox.gvisor.platform",
			"%q is not one of %s", g.Platform, strings.Join(GVisorPlatforms, ", "))
		v.check(strings.HasPrefix(g.Python, "/"), "sandbox.gvisor.python", "%q must be an absolute path", g.Python)
		v.check(g.StateDir == "" || strings.HasPrefix(g.StateDir, "/"), "sandbox.gvisor.state_dir", "%q must be an absolute path", g.StateDir)
		v.check(g.MaxImages >= 0 && g.MaxImages <= 64, "sandbox.gvisor.max_images", "%d must be between 0 and 64", g.MaxImages)
		v.check(g.MaxImageBytes >= 0 && g.MaxImageBytes <= 64*MiB, "sandbox.gvisor.max_image_bytes", "%s must be at most 64MiB", g.MaxImageBytes)
		// runsc, its gofer, the sentry and its platform's stubs are
		// host threads in the sandbox's cgroup: an idle sandbox has ~80.
		v.check(l.Pids >= 128, "sandbox.limits.pids", "%d is too few for gvisor: an idle sandbox already holds ~80 host threads (use 512)", l.Pids)
		v.check(l.GuestMemory >= 256*MiB, "sandbox.limits.guest_memory", "%s is too little for gvisor: CPython with numpy, pandas and matplotlib imported holds ~150MiB (use 1GiB)", l.GuestMemory)
	default:
		v.add("sandbox.provider", "%q is not one of wasm, gvisor", s.Provider)
	}
	c.validateNetwork(v)
	// Bounds the pool leaves open but that keep one response's output sane.
	v.check(l.StdoutBytes <= 64*MiB, "sandbox.limits.stdout_bytes", "%s must be at most 64MiB", l.StdoutBytes)
	v.check(l.StderrBytes <= 64*MiB, "sandbox.limits.stderr_bytes", "%s must be at most 64MiB", l.StderrBytes)
	p := s.Isolation.CgroupParent
	v.check(strings.HasPrefix(p, "/") && len(p) > 1 && !strings.Contains(p, ".."), "sandbox.isolation.cgroup_parent",
		"%q must be an absolute cgroup path below the root, such as /codeinterp", p)
}

func (c *Config) validateLogging(v *validator) {
	switch c.Logging.Level {
	case "debug", "info", "warn", "error":
	default:
		v.add("logging.level", "%q is not one of debug, info, warn, error", c.Logging.Level)
	}
	switch c.Logging.Format {
	case "json", "console":
	default:
		v.add("logging.format", "%q is not one of json, console", c.Logging.Format)
	}
	m := c.Metrics
	if m.Enabled {
		v.check(c.Server.AdminListen != "", "metrics.enabled", "needs server.admin_listen (the metrics are served there)")
		switch {
		case !strings.HasPrefix(m.Path, "/") || strings.ContainsAny(m.Path, "?# "):
			v.add("metrics.path", "%q must be a bare path starting with /", m.Path)
		case m.Path == "/healthz" || m.Path == "/readyz":
			v.add("metrics.path", "%q is taken by the health endpoints", m.Path)
		}
	}
}

// domainRE is a lowercase DNS host name of at least two labels: what
// allowed_domains and resolve may name (no scheme, port, path, wildcard or
// IP literal; see egress).
var domainRE = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]([a-z0-9-]{0,61}[a-z0-9])?$`)

func (c *Config) validateNetwork(v *validator) {
	n := c.Sandbox.Network
	if n.Enabled() && c.Sandbox.Provider != ProviderGVisor {
		v.add("sandbox.network.allowed_domains", "needs sandbox.provider: gvisor (the %s sandbox has no sockets, so it can have no network)", c.Sandbox.Provider)
	}
	seen := map[string]bool{}
	for i, d := range n.AllowedDomains {
		f := "sandbox.network.allowed_domains[" + strconv.Itoa(i) + "]"
		switch {
		case !domainRE.MatchString(d) || len(d) > 253:
			v.add(f, "%q is not a lowercase host name such as pypi.org (no scheme, port, path, wildcard or IP address)", d)
		case seen[d]:
			v.add(f, "%q is listed twice", d)
		}
		seen[d] = true
	}
	v.check(n.MaxDomains >= 1 && n.MaxDomains <= 1024, "sandbox.network.max_domains", "%d must be between 1 and 1024", n.MaxDomains)
	v.check(n.MaxBytes >= 1*KiB, "sandbox.network.max_bytes", "%s must be at least 1KiB", n.MaxBytes)
	v.check(n.MaxConnections >= 1, "sandbox.network.max_connections", "%d must be at least 1", n.MaxConnections)
	v.check(n.DialTimeout > 0, "sandbox.network.dial_timeout", "%s must be positive", n.DialTimeout)
	v.check(n.IdleTimeout > 0, "sandbox.network.idle_timeout", "%s must be positive", n.IdleTimeout)
	v.check(n.CAFile == "" || strings.HasPrefix(n.CAFile, "/"), "sandbox.network.ca_file", "%q must be an absolute path", n.CAFile)
	names := make([]string, 0, len(n.Resolve))
	for name := range n.Resolve {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		f := "sandbox.network.resolve." + name
		if !domainRE.MatchString(name) {
			v.add(f, "%q is not a lowercase host name", name)
			continue
		}
		to := n.Resolve[name]
		host, port, err := net.SplitHostPort(to)
		if err != nil {
			// A host alone keeps the port the code asked for.
			host, port = to, ""
		}
		if host == "" || strings.ContainsAny(to, "/ ") || (port == "" && strings.Contains(host, ":") && net.ParseIP(host) == nil) {
			v.add(f, "%q must be host:port or a host", to)
			continue
		}
		if p, err := strconv.Atoi(port); port != "" && (err != nil || p < 1 || p > 65535) {
			v.add(f, "%q: port must be 1-65535", to)
		}
	}
}
