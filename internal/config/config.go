package config

import (
	"net/url"
	"strings"
	"time"
)

// Config is the whole configuration of `extproc serve` and `extproc dev`.
// The YAML keys are the snake_case names in the json tags (sigs.k8s.io/yaml
// maps YAML through JSON). Every field has a documented default (Default).
type Config struct {
	Server        Server        `json:"server"`
	Routes        Routes        `json:"routes"`
	Interceptor   Interceptor   `json:"interceptor"`
	Upstream      Upstream      `json:"upstream"`
	Sandbox       Sandbox       `json:"sandbox"`
	API           API           `json:"api"`
	Store         Store         `json:"store"`
	Responses     Responses     `json:"responses"`
	Conversations Conversations `json:"conversations"`
	Files         Files         `json:"files"`
	Containers    Containers    `json:"containers"`
	Checkpoints   Checkpoints   `json:"checkpoints"`
	Cluster       Cluster       `json:"cluster"`
	Logging       Logging       `json:"logging"`
	Metrics       Metrics       `json:"metrics"`
	Telemetry     Telemetry     `json:"telemetry"`
}

// Server is the ext_proc gRPC server and its admin HTTP server.
type Server struct {
	// Listen is the gRPC ext_proc address (host:port). The default binds
	// loopback only: the service has no authentication of its own, so only
	// Envoy may reach it. Kubernetes deployments set ":50051".
	Listen string `json:"listen"`
	// AdminListen serves /healthz, /readyz and (if metrics.enabled) the
	// Prometheus metrics over plain HTTP. "" disables the admin server.
	AdminListen string `json:"admin_listen"`
	// ShutdownTimeout bounds the graceful drain of open streams on SIGTERM.
	ShutdownTimeout time.Duration `json:"shutdown_timeout"`
	// MaxBodyBytes is the largest request or response body the filter
	// accepts (larger ones get an OpenAI-shaped error). Keep it equal to the
	// Envoy buffer limit (per_connection_buffer_limit_bytes /
	// request_body_buffer_limit). The gRPC receive limit is derived from it
	// (GRPCMaxRecvBytes).
	MaxBodyBytes ByteSize `json:"max_body_bytes"`
	// OverrideMessageTimeout is sent as override_message_timeout before
	// long work (code runs and follow-up inference). Envoy honours it only
	// if it is at most the filter's max_message_timeout: deploy/envoy sets
	// max_message_timeout to 900s, so this must stay ≤ 900s there. 0 turns
	// the override off (then Envoy's message_timeout must cover the loop).
	OverrideMessageTimeout time.Duration `json:"override_message_timeout"`
}

// Routes selects which requests the interceptor handles; every other
// request is passed through with a mode_override to NONE bodies.
type Routes struct {
	// Paths are exact :path values (the query string is ignored).
	Paths []string `json:"paths"`
	// Methods are the HTTP methods handled on those paths.
	Methods []string `json:"methods"`
	// MessagesPaths are the paths of Anthropic's Messages API, whose
	// code_execution tool this server runs (package messages); empty: off.
	MessagesPaths []string `json:"messages_paths"`
}

// Interceptor is the Responses-API loop.
type Interceptor struct {
	// FunctionName is the name of the function tool the native
	// code_interpreter tool is rewritten into.
	FunctionName string `json:"function_name"`
	// MaxRounds caps follow-up inferences per response. A client cannot
	// raise it (max_tool_calls can only lower the number of calls).
	MaxRounds int `json:"max_rounds"`
	// MaxParallelCalls caps the code calls of one model turn that are run;
	// further calls of that turn are answered "not run".
	MaxParallelCalls int `json:"max_parallel_calls"`
	// MaxToolCalls caps the code calls run for one client request; the
	// request's max_tool_calls can only lower it.
	MaxToolCalls int `json:"max_tool_calls"`
	// FollowUp is "auto" (previous_response_id when the upstream stored the
	// response, else replay), "replay" or "previous_response_id".
	FollowUp string `json:"follow_up"`
	// MaxMemoryLimit is the largest container memory_limit a client may
	// ask for ("1g" style in the request); above it the request gets a 400.
	MaxMemoryLimit ByteSize `json:"max_memory_limit"`
	// InputFiles is what the model gets of a request's input_file parts,
	// which are copied into the container either way: "pass" sends them on
	// unchanged, "note" replaces each with a text note saying where the
	// file is (for models that reject file parts).
	InputFiles string `json:"input_files"`
	// Streaming is how a "stream": true client is answered: "live" (the
	// upstream streams and the client gets every event as it happens;
	// Envoy's response body is switched to FULL_DUPLEX_STREAMED by a
	// mode_override) or "synthetic" (BUFFERED bodies; the whole stream is
	// made after the loop).
	Streaming string `json:"streaming"`
	// CallStatus is the status clients get on a code_interpreter_call:
	// "openai" ("completed" for every call that ended — a Python
	// exception, a time, memory or output limit, a call not run — with the
	// reason in its logs, as OpenAI's hosted tool and its clients' schemas
	// have it) or "detailed" ("failed" for an exception or crash,
	// "incomplete" for a limit). The model is told the detail either way.
	CallStatus string `json:"call_status"`
	// History is how a request continuing one of this server's stored
	// responses (previous_response_id) reaches the model server:
	// "upstream" names the model server's own id of the response's last
	// round; "expand" sends the conversation itself (for model servers
	// that keep no state: Ollama, a vLLM without a store); "auto" uses the
	// model server's state when it stored the response, else expands.
	History string `json:"history"`
}

// Upstream is where follow-up inference goes.
type Upstream struct {
	// URL is the absolute http(s) URL follow-up Responses requests are
	// POSTed to, e.g. Envoy's internal listener
	// "http://127.0.0.1:10001/v1/responses". Follow-ups go only here, never
	// to a URL derived from the client's request.
	URL string `json:"url"`
	// ForwardHeaders are the client request headers copied onto follow-ups
	// (names, case-insensitive; stored lowercase).
	ForwardHeaders []string `json:"forward_headers"`
	// Headers are static headers added to every follow-up (after the
	// forwarded ones, so they win).
	Headers map[string]string `json:"headers"`
	// Timeout bounds one follow-up call.
	Timeout time.Duration `json:"timeout"`
	// MessagesURL is where follow-up Messages API requests go (routes.
	// messages_paths). "" means url with its final /responses replaced by
	// /messages ("http://127.0.0.1:10001/v1/messages").
	MessagesURL string `json:"messages_url"`
}

// MessagesUpstream is the effective upstream.messages_url ("" when it
// cannot be derived from upstream.url).
func (u Upstream) MessagesUpstream() string {
	if u.MessagesURL != "" {
		return u.MessagesURL
	}
	p, err := url.Parse(u.URL)
	if err != nil {
		return ""
	}
	base, ok := strings.CutSuffix(p.Path, "/responses")
	if !ok {
		return ""
	}
	p.Path, p.RawPath = base+"/messages", ""
	return p.String()
}

// Sandbox configures the interpreters (sandbox/pool over a provider).
type Sandbox struct {
	// Provider is "wasm" (CPython-WASI under wazero: the standard library
	// only) or "gvisor" (Debian's CPython with numpy, pandas, matplotlib and
	// friends, in gVisor sandboxes; needs runsc and the python3-* packages).
	Provider string `json:"provider"`
	// RuntimeDir (wasm) holds python.wasm and lib/python3.13. "" means: the
	// directory in $CODEINTERP_RUNTIME_DIR if set (the build script's own
	// variable), else the newest complete cpython-3.13.5-* directory under
	// ${XDG_CACHE_HOME:-$HOME/.cache}/codeinterp (cmd/extproc resolves them).
	RuntimeDir string `json:"runtime_dir"`
	// CacheDir (wasm) holds wazero's compilation cache. "" means
	// ${XDG_CACHE_HOME:-$HOME/.cache}/codeinterp/wazero.
	CacheDir string `json:"cache_dir"`
	// MaxSessions is how many sessions (one per response) may be open at once.
	MaxSessions int `json:"max_sessions"`
	// WarmWorkers interpreters are kept started and waiting.
	WarmWorkers int `json:"warm_workers"`
	// SessionsPerWorker (wasm) is how many sessions one worker process
	// serves in turn, each a fresh interpreter restored from the snapshot.
	// 1 (the default) is a process per session; more trades that
	// isolation for throughput, never across owners (docs/security.md).
	SessionsPerWorker int `json:"sessions_per_worker"`
	// Snapshot: sessions start from a snapshot of an initialised
	// interpreter (true, the default) or cold (false). wasm: a snapshot of
	// CPython-WASI's memory instead of ≈120 ms of start-up; gvisor: runsc
	// restore of a checkpointed sandbox whose Python imported numpy, pandas
	// and matplotlib (≈0.4 s) instead of runsc run and the imports (≈3 s).
	Snapshot bool `json:"snapshot"`
	// SnapshotRotateSessions: a new snapshot (wasm) or checkpoint (gvisor),
	// with a new str hash seed, after this many sessions (0: only at each
	// server start).
	SnapshotRotateSessions int `json:"snapshot_rotate_sessions"`
	// SnapshotDir (wasm) is where the server writes its snapshots; it must
	// be writable (a read-only cache_dir in an image needs one). "" means
	// cache_dir/snapshots.
	SnapshotDir string `json:"snapshot_dir"`
	// QueueWait is how long a session open waits for capacity.
	QueueWait time.Duration `json:"queue_wait"`
	Limits    Limits        `json:"limits"`
	Isolation Isolation     `json:"isolation"`
	GVisor    GVisor        `json:"gvisor"`
	Network   Network       `json:"network"`
}

// Network is the operator's bound on network_policy allowlists (package
// egress): with allowed_domains empty (the default) the feature is off and
// every network_policy but {"type": "disabled"} is a 400. Only the gVisor
// provider can have it (the WASM sandbox has no sockets at all).
type Network struct {
	// AllowedDomains are the domains a request's allowed_domains may
	// name (lowercase host names, matched exactly: a request's list can
	// only narrow this one). Empty: the feature is off.
	AllowedDomains []string `json:"allowed_domains"`
	// MaxDomains bounds the entries of one policy's allowed_domains.
	MaxDomains int `json:"max_domains"`
	// MaxBytes bounds what one session sends and receives through the
	// proxy, both directions summed.
	MaxBytes ByteSize `json:"max_bytes"`
	// MaxConnections bounds the connections one session opens over its life.
	MaxConnections int `json:"max_connections"`
	// Resolve maps a domain to the "host:port" the proxy connects to
	// instead of resolving it (a local package mirror, an air-gapped site,
	// tests); a "host" alone keeps the port the code asked for (443 or
	// 80). Keys are lowercase domain names. The operator's word: a name
	// here may point at a private or loopback address, which DNS answers
	// never may.
	Resolve map[string]string `json:"resolve"`
	// CAFile is a PEM bundle of CAs the proxy trusts besides the system's
	// when it verifies origins (it terminates TLS to domains with
	// domain_secrets); "" means the system's only.
	CAFile string `json:"ca_file"`
	// DialTimeout bounds a connection to an origin; IdleTimeout ends a
	// connection on which nothing moved for that long (slow-loris bounds).
	DialTimeout time.Duration `json:"dial_timeout"`
	IdleTimeout time.Duration `json:"idle_timeout"`
}

// Enabled reports whether network_policy allowlists are on.
func (n Network) Enabled() bool { return len(n.AllowedDomains) > 0 }

// The sandbox providers.
const (
	ProviderWASM   = "wasm"
	ProviderGVisor = "gvisor"
)

// GVisor configures the gVisor provider (sandbox/gvisor).
type GVisor struct {
	// Runsc is the runsc binary: a path, or a name looked up on PATH. ""
	// means the pinned gVisor that `make setup` builds
	// (runtime/build-runsc.sh): $CODEINTERP_RUNSC_DIR/runsc if set, else
	// the newest build in ${XDG_CACHE_HOME:-$HOME/.cache}/codeinterp. The
	// server refuses a runsc that is not the pinned version.
	Runsc string `json:"runsc"`
	// Platform is runsc's --platform: "systrap" (the default: seccomp
	// traps, gVisor's default platform), "ptrace" (slower; where a
	// seccomp profile forbids systrap), or "kvm" (needs /dev/kvm; it
	// hangs in a VM without nested virtualisation).
	Platform string `json:"platform"`
	// RootFS is the sandbox's root filesystem, read-only: the Debian tree
	// with python3 and the data-science packages that `make setup`
	// (runtime/build-gvisor-rootfs.sh) builds and the gVisor image ships.
	// "" means $CODEINTERP_GVISOR_ROOTFS if set, else the newest build in
	// ${XDG_CACHE_HOME:-$HOME/.cache}/codeinterp.
	RootFS string `json:"rootfs"`
	// Python is the interpreter inside the sandbox, a path in RootFS.
	Python string `json:"python"`
	// StateDir holds runsc's state and the per-sandbox bundles. "" means a
	// private directory under the system's temporary directory.
	StateDir string `json:"state_dir"`
	// MaxImages and MaxImageBytes bound the figures one run returns.
	MaxImages     int      `json:"max_images"`
	MaxImageBytes ByteSize `json:"max_image_bytes"`
}

// Limits bound what one run or session may use (pool.Limits).
type Limits struct {
	SourceBytes    ByteSize      `json:"source_bytes"`
	RunTimeout     time.Duration `json:"run_timeout"`
	GuestMemory    ByteSize      `json:"guest_memory"`
	MaxGuestMemory ByteSize      `json:"max_guest_memory"`
	WorkerOverhead ByteSize      `json:"worker_overhead"`
	StdoutBytes    ByteSize      `json:"stdout_bytes"`
	StderrBytes    ByteSize      `json:"stderr_bytes"`
	ScratchBytes   ByteSize      `json:"scratch_bytes"`
	Pids           int64         `json:"pids"`
	CPUs           float64       `json:"cpus"`
}

// Isolation says how workers are confined (pool.Isolation).
type Isolation struct {
	// Cgroup is "auto", "v1", "v2" or "off" (laptops only).
	Cgroup string `json:"cgroup"`
	// CgroupParent is the parent cgroup under which one group per worker is made.
	CgroupParent string `json:"cgroup_parent"`
	// UID and GID the workers drop to when the server runs as root.
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// Logging configures zap.
type Logging struct {
	Level  string `json:"level"`  // debug, info, warn, error
	Format string `json:"format"` // json, console
}

// Metrics configures the Prometheus endpoint on server.admin_listen.
type Metrics struct {
	Enabled bool   `json:"enabled"`
	Path    string `json:"path"`
}

// Telemetry configures OpenTelemetry tracing (package telemetry). The
// exporter is configured the standard way, by the OTEL_* environment
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL,
// OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER…); OTEL_TRACES_EXPORTER=otlp turns
// tracing on as tracing: true does, =none turns it off.
type Telemetry struct {
	// Tracing exports spans: one per /v1/responses request, model round,
	// code run and API request.
	Tracing bool `json:"tracing"`
	// CaptureContent puts the code and its output on the run spans (off:
	// never code, output, file contents or secrets).
	CaptureContent bool `json:"capture_content"`
}

// Default returns the documented defaults. A fresh value each call.
func Default() *Config {
	return &Config{
		Server: Server{
			Listen:                 "127.0.0.1:50051",
			AdminListen:            "127.0.0.1:9090",
			ShutdownTimeout:        30 * time.Second,
			MaxBodyBytes:           16 * MiB,
			OverrideMessageTimeout: 600 * time.Second,
		},
		Routes: Routes{
			Paths:         []string{"/v1/responses"},
			Methods:       []string{"POST"},
			MessagesPaths: []string{"/v1/messages"},
		},
		Interceptor: defaultInterceptor(),
		Upstream: Upstream{
			URL:            "http://127.0.0.1:10001/v1/responses",
			ForwardHeaders: []string{"authorization", "api-key", "openai-organization", "openai-project"},
			Headers:        map[string]string{},
			Timeout:        120 * time.Second,
		},
		Sandbox: Sandbox{
			Provider:               ProviderWASM,
			MaxSessions:            8,
			WarmWorkers:            2,
			SessionsPerWorker:      1,
			Snapshot:               true,
			SnapshotRotateSessions: 1000,
			QueueWait:              2 * time.Second,
			Limits: Limits{
				SourceBytes:    256 * KiB,
				RunTimeout:     30 * time.Second,
				GuestMemory:    256 * MiB,
				MaxGuestMemory: 1 * GiB,
				WorkerOverhead: 192 * MiB,
				StdoutBytes:    64 * KiB,
				StderrBytes:    64 * KiB,
				ScratchBytes:   32 * MiB,
				Pids:           64,
				CPUs:           1,
			},
			Isolation: Isolation{Cgroup: "auto", CgroupParent: "/codeinterp", UID: 65534, GID: 65534},
			GVisor: GVisor{
				Runsc:         "",
				Platform:      "systrap",
				Python:        "/usr/bin/python3",
				MaxImages:     8,
				MaxImageBytes: 8 * MiB,
			},
			Network: Network{
				AllowedDomains: []string{},
				MaxDomains:     32,
				MaxBytes:       512 * MiB,
				MaxConnections: 256,
				Resolve:        map[string]string{},
				DialTimeout:    10 * time.Second,
				IdleTimeout:    60 * time.Second,
			},
		},
		API:           defaultAPI(),
		Store:         defaultStore(),
		Responses:     defaultResponses(),
		Checkpoints:   defaultCheckpoints(),
		Cluster:       defaultCluster(),
		Conversations: defaultConversations(),
		Files:         defaultFiles(),
		Logging:       Logging{Level: "info", Format: "json"},
		Metrics:       Metrics{Enabled: true, Path: "/metrics"},
	}
}

func defaultInterceptor() Interceptor {
	return Interceptor{
		FunctionName:     "code_interpreter",
		MaxRounds:        8,
		MaxParallelCalls: 4,
		MaxToolCalls:     32,
		FollowUp:         "auto",
		MaxMemoryLimit:   1 * GiB,
		InputFiles:       "pass",
		Streaming:        "live",
		CallStatus:       "openai",
		History:          "auto",
	}
}

// GRPCMaxRecvBytes is the gRPC receive limit the server must set: Envoy
// sends a BUFFERED body as one message, so grpc-go's 4 MiB default would
// reject real responses. Body plus headroom for headers and framing.
func (s Server) GRPCMaxRecvBytes() int { return int(s.MaxBodyBytes + MiB) }
