package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

const exampleFile = "../../deploy/codeinterp.yaml"

func TestDefaultIsValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("defaults do not validate:\n%v", err)
	}
}

// The example file documents every field with its default: it must parse to
// exactly Default() and mention every leaf field.
func TestExampleFileIsTheDefaults(t *testing.T) {
	data, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(data)
	if err != nil {
		t.Fatalf("example does not parse:\n%v", err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("example does not validate:\n%v", err)
	}
	if !reflect.DeepEqual(c, Default()) {
		t.Fatalf("example differs from Default():\n got %+v\nwant %+v", c, Default())
	}
	var raw map[string]any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	present := map[string]bool{}
	var walk func(string, map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			p := join(prefix, k)
			present[p] = true
			if sub, ok := v.(map[string]any); ok && p != "upstream.headers" {
				walk(p, sub)
			}
		}
	}
	walk("", raw)
	for _, e := range EnvVars() {
		if !present[e.Path] {
			t.Errorf("example file does not document %s", e.Path)
		}
	}
	loaded, err := LoadEnv(exampleFile, nil)
	if err != nil {
		t.Fatalf("LoadEnv(example): %v", err)
	}
	if !reflect.DeepEqual(loaded, Default()) {
		t.Errorf("LoadEnv(example) differs from Default()")
	}
}

func TestParseValues(t *testing.T) {
	data, err := os.ReadFile("../../testdata/config/minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Server.Listen = ":50051"
	want.Server.AdminListen = ":9090"
	want.Upstream.Headers = map[string]string{"X-Tenant": "blue"}
	want.Sandbox.MaxSessions = 16
	want.Sandbox.WarmWorkers = 4
	want.Sandbox.Limits.RunTimeout = time.Minute
	want.Sandbox.Limits.GuestMemory = 512 * MiB
	want.Sandbox.Limits.MaxGuestMemory = 2 * GiB
	want.Logging.Format = "console"
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got  %+v\nwant %+v", c, want)
	}
}

func TestParseOverDefaults(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want func(*Config)
	}{
		{"empty file", "", func(*Config) {}},
		{"comment only", "# nothing\n", func(*Config) {}},
		{"null section keeps defaults", "server:\n", func(*Config) {}},
		{"null leaf keeps default", "server:\n  listen: null\n", func(*Config) {}},
		{"list replaces default", "routes:\n  paths: [/a, /b]\n", func(c *Config) { c.Routes.Paths = []string{"/a", "/b"} }},
		{"empty list", "upstream:\n  forward_headers: []\n", func(c *Config) { c.Upstream.ForwardHeaders = []string{} }},
		{"size plain bytes", "server:\n  max_body_bytes: 1048576\n", func(c *Config) { c.Server.MaxBodyBytes = MiB }},
		{"size docker style", "interceptor:\n  max_memory_limit: 1g\n", func(c *Config) { c.Interceptor.MaxMemoryLimit = GiB }},
		{"size fractional", "sandbox:\n  limits:\n    max_guest_memory: 1.5GiB\n", func(c *Config) { c.Sandbox.Limits.MaxGuestMemory = 3 * GiB / 2 }},
		{"duration", "upstream:\n  timeout: 1m30s\n", func(c *Config) { c.Upstream.Timeout = 90 * time.Second }},
		{"float", "sandbox:\n  limits:\n    cpus: 0.5\n", func(c *Config) { c.Sandbox.Limits.CPUs = 0.5 }},
		{"integer float", "sandbox:\n  limits:\n    cpus: 2\n", func(c *Config) { c.Sandbox.Limits.CPUs = 2 }},
		{"bool", "metrics:\n  enabled: false\n", func(c *Config) { c.Metrics.Enabled = false }},
		{"uint", "sandbox:\n  isolation:\n    uid: 1000\n", func(c *Config) { c.Sandbox.Isolation.UID = 1000 }},
		{"quoted number string", "server:\n  listen: \"8080\"\n", func(c *Config) { c.Server.Listen = "8080" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			want := Default()
			tt.want(want)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

// wantFieldErrors checks that err holds exactly one *FieldError per entry,
// each with that path and a reason containing the text.
func wantFieldErrors(t *testing.T, err error, want [][2]string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want %v", want)
	}
	got := FieldErrors(err)
	if len(got) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(got), len(want), err)
	}
	for i, w := range want {
		if got[i].Path != w[0] || !strings.Contains(got[i].Reason, w[1]) {
			t.Errorf("error %d = %q; want path %q with reason containing %q", i, got[i].Error(), w[0], w[1])
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want [][2]string
	}{
		{"unknown top-level field", "uptream:\n  url: http://x/\n", [][2]string{{"uptream", `unknown field (did you mean "upstream"?)`}}},
		{"unknown nested field", "sandbox:\n  limits:\n    run_timout: 1s\n", [][2]string{{"sandbox.limits.run_timout", `did you mean "run_timeout"`}}},
		{"unknown field, no near miss", "logging:\n  colour: red\n", [][2]string{{"logging.colour", "unknown field; known fields: level, format"}}},
		{"string for int", "sandbox:\n  max_sessions: many\n", [][2]string{{"sandbox.max_sessions", "must be a number, not a string"}}},
		{"fraction for int", "sandbox:\n  max_sessions: 1.5\n", [][2]string{{"sandbox.max_sessions", "not an integer"}}},
		{"negative uid", "sandbox:\n  isolation:\n    uid: -1\n", [][2]string{{"sandbox.isolation.uid", "between 0 and 4294967295"}}},
		{"bare number duration", "upstream:\n  timeout: 30\n", [][2]string{{"upstream.timeout", `duration string such as "30s"`}}},
		{"bad duration", "upstream:\n  timeout: 30 secs\n", [][2]string{{"upstream.timeout", "is not a duration"}}},
		{"ambiguous size unit", "server:\n  max_body_bytes: 16MB\n", [][2]string{{"server.max_body_bytes", `unit "MB" is ambiguous`}}},
		{"unknown size unit", "server:\n  max_body_bytes: 16 parsecs\n", [][2]string{{"server.max_body_bytes", `unknown unit "parsecs"`}}},
		{"bool for size", "server:\n  max_body_bytes: true\n", [][2]string{{"server.max_body_bytes", "not a boolean"}}},
		{"number for string", "logging:\n  level: 3\n", [][2]string{{"logging.level", "must be a string, not a number"}}},
		{"yaml 1.1 bool for string", "logging:\n  level: on\n", [][2]string{{"logging.level", "must be a string, not a boolean"}}},
		{"string for bool", "metrics:\n  enabled: \"maybe\"\n", [][2]string{{"metrics.enabled", "must be true or false"}}},
		{"string for list", "routes:\n  paths: /v1/responses\n", [][2]string{{"routes.paths", "must be a list of strings"}}},
		{"number in list", "routes:\n  methods: [POST, 1]\n", [][2]string{{"routes.methods", "item 1 must be a string"}}},
		{"number in map", "upstream:\n  headers:\n    x-a: 1\n", [][2]string{{"upstream.headers", `value of "x-a" must be a string`}}},
		{"list for section", "server: [a]\n", [][2]string{{"server", "must be a mapping, not a list"}}},
		{"scalar document", "hello\n", [][2]string{{"", "document must be a mapping"}}},
		{"duplicate key", "server:\n  listen: a:1\n  listen: b:2\n", [][2]string{{"", "YAML"}}},
		{"not yaml", "server: [\n", [][2]string{{"", "YAML"}}},
		{"all errors collected", "uptream: {}\nlogging:\n  level: 3\nsandbox:\n  max_sessions: x\n", [][2]string{
			{"logging.level", "must be a string"},
			{"sandbox.max_sessions", "must be a number"},
			{"uptream", "unknown field"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			wantFieldErrors(t, err, tt.want)
		})
	}
}

func TestValidateErrors(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		want   [][2]string
	}{
		{"listen empty", func(c *Config) { c.Server.Listen = "" }, [][2]string{{"server.listen", "must be set"}}},
		{"listen no port", func(c *Config) { c.Server.Listen = "localhost" }, [][2]string{{"server.listen", "is not host:port"}}},
		{"listen bad port", func(c *Config) { c.Server.Listen = ":99999" }, [][2]string{{"server.listen", "between 0 and 65535"}}},
		{"admin bad", func(c *Config) { c.Server.AdminListen = "nope" }, [][2]string{{"server.admin_listen", "is not host:port"}}},
		{"admin same as listen", func(c *Config) { c.Server.AdminListen = c.Server.Listen }, [][2]string{{"server.admin_listen", "must differ"}}},
		{"shutdown zero", func(c *Config) { c.Server.ShutdownTimeout = 0 }, [][2]string{{"server.shutdown_timeout", "must be positive"}}},
		{"body too small", func(c *Config) { c.Server.MaxBodyBytes = KiB }, [][2]string{{"server.max_body_bytes", "between 64KiB and 1GiB"}}},
		{"body too big", func(c *Config) { c.Server.MaxBodyBytes = 2 * GiB }, [][2]string{{"server.max_body_bytes", "between 64KiB and 1GiB"}}},
		{"override above envoy range", func(c *Config) { c.Server.OverrideMessageTimeout = 2 * time.Hour }, [][2]string{{"server.override_message_timeout", "between 1ms and 1h"}}},
		{"override shorter than a round", func(c *Config) { c.Server.OverrideMessageTimeout = time.Minute }, [][2]string{{"server.override_message_timeout", "shorter than one round"}}},
		{"no paths", func(c *Config) { c.Routes.Paths = nil }, [][2]string{{"routes.paths", "at least one path"}}},
		{"relative path", func(c *Config) { c.Routes.Paths = []string{"v1/responses"} }, [][2]string{{"routes.paths[0]", "must start with /"}}},
		{"path with query", func(c *Config) { c.Routes.Paths = []string{"/v1/responses?x=1"} }, [][2]string{{"routes.paths[0]", "bare path"}}},
		{"duplicate path", func(c *Config) { c.Routes.Paths = []string{"/a", "/a"} }, [][2]string{{"routes.paths[1]", "listed twice"}}},
		{"no methods", func(c *Config) { c.Routes.Methods = []string{} }, [][2]string{{"routes.methods", "at least one method"}}},
		{"lower-case method", func(c *Config) { c.Routes.Methods = []string{"post"} }, [][2]string{{"routes.methods[0]", "upper-case"}}},
		{"duplicate method", func(c *Config) { c.Routes.Methods = []string{"POST", "POST"} }, [][2]string{{"routes.methods[1]", "listed twice"}}},
		{"unknown gvisor platform", func(c *Config) { gvisorNet(c); c.Sandbox.GVisor.Platform = "kvmm" },
			[][2]string{{"sandbox.gvisor.platform", `"kvmm" is not one of systrap, ptrace, kvm`}}},
		{"network on wasm", func(c *Config) { c.Sandbox.Network.AllowedDomains = []string{"pypi.org"} },
			[][2]string{{"sandbox.network.allowed_domains", "needs sandbox.provider: gvisor"}}},
		{"network domain with a scheme", func(c *Config) { gvisorNet(c, "https://pypi.org") }, [][2]string{{"sandbox.network.allowed_domains[0]", "not a lowercase host name"}}},
		{"network wildcard", func(c *Config) { gvisorNet(c, "*.pypi.org") }, [][2]string{{"sandbox.network.allowed_domains[0]", "wildcard"}}},
		{"network IP", func(c *Config) { gvisorNet(c, "pypi.org", "10.0.0.1") }, [][2]string{{"sandbox.network.allowed_domains[1]", "IP address"}}},
		{"network upper case", func(c *Config) { gvisorNet(c, "PyPI.org") }, [][2]string{{"sandbox.network.allowed_domains[0]", "lowercase"}}},
		{"network duplicate", func(c *Config) { gvisorNet(c, "pypi.org", "pypi.org") }, [][2]string{{"sandbox.network.allowed_domains[1]", "listed twice"}}},
		{"network max_domains", func(c *Config) { gvisorNet(c, "pypi.org"); c.Sandbox.Network.MaxDomains = 0 }, [][2]string{{"sandbox.network.max_domains", "between 1 and 1024"}}},
		{"network max_bytes", func(c *Config) { c.Sandbox.Network.MaxBytes = 10 }, [][2]string{{"sandbox.network.max_bytes", "at least 1KiB"}}},
		{"network max_connections", func(c *Config) { c.Sandbox.Network.MaxConnections = 0 }, [][2]string{{"sandbox.network.max_connections", "at least 1"}}},
		{"network timeouts", func(c *Config) { c.Sandbox.Network.DialTimeout = 0; c.Sandbox.Network.IdleTimeout = -1 },
			[][2]string{{"sandbox.network.dial_timeout", "must be positive"}, {"sandbox.network.idle_timeout", "must be positive"}}},
		{"network ca_file relative", func(c *Config) { c.Sandbox.Network.CAFile = "ca.pem" }, [][2]string{{"sandbox.network.ca_file", "absolute path"}}},
		{"network resolve name", func(c *Config) { c.Sandbox.Network.Resolve = map[string]string{"Py_PI": "10.0.0.5:443"} }, [][2]string{{"sandbox.network.resolve.Py_PI", "not a lowercase host name"}}},
		{"network resolve port", func(c *Config) { c.Sandbox.Network.Resolve = map[string]string{"pypi.org": "10.0.0.5:99999"} }, [][2]string{{"sandbox.network.resolve.pypi.org", "port must be 1-65535"}}},
		{"network resolve target", func(c *Config) { c.Sandbox.Network.Resolve = map[string]string{"pypi.org": "http://x/"} }, [][2]string{{"sandbox.network.resolve.pypi.org", "host:port or a host"}}},
		{"streaming", func(c *Config) { c.Interceptor.Streaming = "buffered" }, [][2]string{{"interceptor.streaming", "not one of live, synthetic"}}},
		{"memory limit above sandbox", func(c *Config) { c.Interceptor.MaxMemoryLimit = 2 * GiB }, [][2]string{{"interceptor.max_memory_limit", "exceeds sandbox.limits.max_guest_memory 1GiB"}}},
		{"url empty", func(c *Config) { c.Upstream.URL = "" }, [][2]string{{"upstream.url", "must be set"}}},
		{"url relative", func(c *Config) { c.Upstream.URL = "/v1/responses" }, [][2]string{{"upstream.url", "absolute http:// or https://"}}},
		{"url scheme", func(c *Config) { c.Upstream.URL = "ftp://h/v1/responses" }, [][2]string{{"upstream.url", "absolute http:// or https://"}}},
		{"url no host", func(c *Config) { c.Upstream.URL = "http:///v1/responses" }, [][2]string{{"upstream.url", "has no host"}}},
		{"url credentials", func(c *Config) { c.Upstream.URL = "https://u:p@h/v1/responses" }, [][2]string{{"upstream.url", "must not carry credentials"}}},
		{"url fragment", func(c *Config) { c.Upstream.URL = "https://h/v1/responses#x" }, [][2]string{{"upstream.url", "fragment"}}},
		{"url unparsable", func(c *Config) { c.Upstream.URL = "http://h:port/" }, [][2]string{{"upstream.url", "is not a URL"}}},
		{"forward bad name", func(c *Config) { c.Upstream.ForwardHeaders = []string{"bad header"} }, [][2]string{{"upstream.forward_headers[0]", "not a valid header name"}}},
		{"forward host", func(c *Config) { c.Upstream.ForwardHeaders = []string{"Host"} }, [][2]string{{"upstream.forward_headers[0]", "the upstream URL decides the host"}}},
		{"forward internal", func(c *Config) { c.Upstream.ForwardHeaders = []string{"x-codeinterp-round"} }, [][2]string{{"upstream.forward_headers[0]", "internal"}}},
		{"forward duplicate", func(c *Config) { c.Upstream.ForwardHeaders = []string{"authorization", "Authorization"} }, [][2]string{{"upstream.forward_headers[1]", "listed twice"}}},
		{"static hop-by-hop", func(c *Config) { c.Upstream.Headers = map[string]string{"connection": "close"} }, [][2]string{{"upstream.headers.connection", "hop-by-hop"}}},
		{"static content-length", func(c *Config) { c.Upstream.Headers = map[string]string{"Content-Length": "1"} }, [][2]string{{"upstream.headers.Content-Length", "set from the follow-up body"}}},
		{"static bad value", func(c *Config) { c.Upstream.Headers = map[string]string{"x-a": "1\r\nx-b: 2"} }, [][2]string{{"upstream.headers.x-a", "CR, LF or NUL"}}},
		{"upstream timeout", func(c *Config) { c.Upstream.Timeout = 0; c.Server.OverrideMessageTimeout = 0 }, [][2]string{{"upstream.timeout", "must be positive"}}},
		{"max guest above wasm32", func(c *Config) { c.Sandbox.Limits.MaxGuestMemory = 8 * GiB }, [][2]string{{"sandbox.limits.max_guest_memory", "at most 4GiB"}}},
		{"stderr", func(c *Config) { c.Sandbox.Limits.StderrBytes = 65 * MiB }, [][2]string{{"sandbox.limits.stderr_bytes", "at most 64MiB"}}},
		{"cgroup parent relative", func(c *Config) { c.Sandbox.Isolation.CgroupParent = "codeinterp" }, [][2]string{{"sandbox.isolation.cgroup_parent", "absolute cgroup path"}}},
		{"cgroup parent root", func(c *Config) { c.Sandbox.Isolation.CgroupParent = "/" }, [][2]string{{"sandbox.isolation.cgroup_parent", "below the root"}}},
		{"cgroup parent escape", func(c *Config) { c.Sandbox.Isolation.CgroupParent = "/a/../.." }, [][2]string{{"sandbox.isolation.cgroup_parent", "absolute cgroup path"}}},
		{"log level", func(c *Config) { c.Logging.Level = "verbose" }, [][2]string{{"logging.level", "not one of debug, info, warn, error"}}},
		{"log format", func(c *Config) { c.Logging.Format = "text" }, [][2]string{{"logging.format", "not one of json, console"}}},
		{"metrics without admin", func(c *Config) { c.Server.AdminListen = "" }, [][2]string{{"metrics.enabled", "needs server.admin_listen"}}},
		{"metrics path", func(c *Config) { c.Metrics.Path = "metrics" }, [][2]string{{"metrics.path", "starting with /"}}},
		{"metrics path taken", func(c *Config) { c.Metrics.Path = "/healthz" }, [][2]string{{"metrics.path", "taken by the health endpoints"}}},
		{"api listen", func(c *Config) { c.API.Listen = "8081" }, [][2]string{{"api.listen", "is not host:port"}}},
		{"api listen same as grpc", func(c *Config) { c.API.Listen = c.Server.Listen }, [][2]string{{"api.listen", "must differ from server.listen"}}},
		{"api listen same as admin", func(c *Config) { c.API.Listen = c.Server.AdminListen }, [][2]string{{"api.listen", "must differ from server.admin_listen"}}},
		{"api no auth headers", func(c *Config) { c.API.AuthHeaders = nil }, [][2]string{{"api.auth_headers", "at least one header"}}},
		{"api auth header bad", func(c *Config) { c.API.AuthHeaders = []string{"a b"} }, [][2]string{{"api.auth_headers[0]", "not a valid header name"}}},
		{"api auth header twice", func(c *Config) { c.API.AuthHeaders = []string{"api-key", "Api-Key"} }, [][2]string{{"api.auth_headers[1]", "listed twice"}}},
		{"api upload above file bytes", func(c *Config) { c.Store.Limits.FileBytes, c.API.MaxUploadBytes = 64*MiB, 128*MiB }, [][2]string{{"api.max_upload_bytes", "store.limits.file_bytes 64MiB"}}},
		{"api expiry seconds", func(c *Config) { c.API.DefaultExpiry = 90 * time.Second }, [][2]string{{"api.default_expiry", "whole number of minutes"}}},
		{"api max below default", func(c *Config) { c.API.MaxExpiry = 10 * time.Minute }, [][2]string{{"api.max_expiry", "shorter than api.default_expiry"}}},
		{"api max too long", func(c *Config) { c.API.MaxExpiry = 1000 * time.Hour }, [][2]string{{"api.max_expiry", "at most 720h"}}},
		{"store backend", func(c *Config) { c.Store.Backend = "etcd" }, [][2]string{{"store.backend", "not one of memory, redis"}}},
		{"redis url empty", func(c *Config) { c.Store.Backend = StoreRedis; c.Store.RedisURL = "" }, [][2]string{{"store.redis_url", "must be set"}}},
		{"redis url scheme", func(c *Config) { c.Store.Backend = StoreRedis; c.Store.RedisURL = "http://r:6379" }, [][2]string{{"store.redis_url", "redis:// or rediss://"}}},
		{"redis url host", func(c *Config) { c.Store.Backend = StoreRedis; c.Store.RedisURL = "redis:///0" }, [][2]string{{"store.redis_url", "has no host"}}},
		{"store container below file", func(c *Config) { c.Store.Limits.FileBytes, c.Store.Limits.ContainerBytes = 2*MiB, MiB }, [][2]string{{"store.limits.container_bytes", "below store.limits.file_bytes"}}},
		{"store owner below container", func(c *Config) { c.Store.Limits.ContainerBytes, c.Store.Limits.OwnerBytes = 256*MiB, 128*MiB }, [][2]string{{"store.limits.owner_bytes", "below store.limits.container_bytes"}}},
		{"store files", func(c *Config) { c.Store.Limits.ContainerFiles = 0 }, [][2]string{{"store.limits.container_files", "between 1 and 100000"}}},
		{"store containers", func(c *Config) { c.Store.Limits.OwnerContainers = 0 }, [][2]string{{"store.limits.owner_containers", "between 1 and 100000"}}},
		{"store owner files", func(c *Config) { c.Store.Limits.OwnerFiles = -1 }, [][2]string{{"store.limits.owner_files", "between 1 and 100000"}}},
		{"store lifetime", func(c *Config) { c.Store.Limits.FileLifetime = time.Minute }, [][2]string{{"store.limits.file_lifetime", "between 1h and 720h"}}},
		{"store expired memory", func(c *Config) { c.Store.Limits.ExpiredMemory = -time.Hour }, [][2]string{{"store.limits.expired_memory", "between 0 and 720h"}}},
		{"resumed streams zero", func(c *Config) { c.Responses.MaxResumedStreams = 0 }, [][2]string{{"responses.max_resumed_streams", "between 1 and 10000"}, {"responses.max_resumed_streams_per_credential", "between 1 and"}}},
		{"resumed streams per credential above all", func(c *Config) { c.Responses.MaxResumedStreams, c.Responses.MaxResumedStreamsPerCredential = 8, 16 },
			[][2]string{{"responses.max_resumed_streams_per_credential", "between 1 and responses.max_resumed_streams 8"}}},
		{"files source", func(c *Config) { c.Files.Source = "s3" }, [][2]string{{"files.source", "not one of local, upstream, off"}}},
		{"files upstream without url", func(c *Config) { c.Files.Source = FilesUpstream }, [][2]string{{"files.upstream_url", "must be set"}}},
		{"files upstream relative", func(c *Config) { c.Files.Source = FilesUpstream; c.Files.UpstreamURL = "/v1" }, [][2]string{{"files.upstream_url", "absolute http"}}},
		{"files upstream credentials", func(c *Config) { c.Files.Source = FilesUpstream; c.Files.UpstreamURL = "https://k:s@api.openai.com/v1" }, [][2]string{{"files.upstream_url", "must not carry credentials"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.mutate(c)
			wantFieldErrors(t, c.Validate(), tt.want)
		})
	}
}

func TestValidateAccepts(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
	}{
		{"override off", func(c *Config) { c.Server.OverrideMessageTimeout = 0 }},
		{"admin off, metrics off", func(c *Config) { c.Server.AdminListen = ""; c.Metrics.Enabled = false }},
		{"metrics path unchecked when disabled", func(c *Config) { c.Metrics.Enabled = false; c.Metrics.Path = "" }},
		{"ipv6 listen", func(c *Config) { c.Server.Listen = "[::1]:50051" }},
		{"port 0 for tests", func(c *Config) { c.Server.Listen = "127.0.0.1:0"; c.Server.AdminListen = "127.0.0.1:1" }},
		{"https with query", func(c *Config) { c.Upstream.URL = "https://x.openai.azure.com/openai/v1/responses?api-version=preview" }},
		{"no forwarded headers", func(c *Config) { c.Upstream.ForwardHeaders = nil }},
		{"cgroups off", func(c *Config) { c.Sandbox.Isolation.Cgroup = "off" }},
		{"no warm workers", func(c *Config) { c.Sandbox.WarmWorkers = 0 }},
		{"api off", func(c *Config) { c.API.Listen = "" }},
		{"redis", func(c *Config) { c.Store.Backend = StoreRedis; c.Store.RedisURL = "rediss://u:p@redis.example:6380/2" }},
		{"files upstream", func(c *Config) { c.Files.Source = FilesUpstream; c.Files.UpstreamURL = "https://api.openai.com/v1" }},
		{"files off", func(c *Config) { c.Files.Source = FilesOff }},
		{"gvisor on systrap (the default)", func(c *Config) { gvisorNet(c); c.Sandbox.GVisor.Platform = "systrap" }},
		{"gvisor on ptrace", func(c *Config) { gvisorNet(c); c.Sandbox.GVisor.Platform = "ptrace" }},
		{"gvisor on kvm", func(c *Config) { gvisorNet(c); c.Sandbox.GVisor.Platform = "kvm" }},
		{"gvisor with a runsc path", func(c *Config) { gvisorNet(c); c.Sandbox.GVisor.Runsc = "/usr/local/bin/runsc" }},
		{"network on gvisor", func(c *Config) {
			gvisorNet(c, "pypi.org", "files.pythonhosted.org")
			c.Sandbox.Network.Resolve = map[string]string{"pypi.org": "10.0.0.5:8443", "files.pythonhosted.org": "mirror.internal"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.mutate(c)
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestLoadEnvFiles(t *testing.T) {
	tests := []struct {
		file string
		want [][2]string
	}{
		{"../../testdata/config/invalid.yaml", [][2]string{
			{"server.listen", "is not host:port"},
			{"server.override_message_timeout", "shorter than one round"},
			{"routes.paths[0]", "must start with /"},
			{"upstream.url", "absolute http:// or https://"},
			{"upstream.forward_headers[1]", "the upstream URL decides the host"},
			{"logging.level", `"verbose" is not one of`},
			// (and sandbox.warm_workers and sandbox.isolation.cgroup, the
			// pool's: cmd/extproc's TestLoadWithChecks)
		}},
		{"../../testdata/config/unknown-field.yaml", [][2]string{
			{"sandbox.limits.run_timout", `did you mean "run_timeout"`},
			{"uptream", `did you mean "upstream"`},
		}},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.file), func(t *testing.T) {
			_, err := LoadEnv(tt.file, nil)
			var le *Error
			if !errors.As(err, &le) || le.Source != tt.file {
				t.Fatalf("error %v is not a *config.Error for %s", err, tt.file)
			}
			wantFieldErrors(t, err, tt.want)
			if !strings.HasPrefix(err.Error(), "invalid configuration "+tt.file+":\n  ") {
				t.Errorf("message does not name the file: %q", err.Error())
			}
		})
	}
	if _, err := LoadEnv("../../testdata/config/does-not-exist.yaml", nil); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: got %v, want an os.ErrNotExist", err)
	}
}

func TestEnvOverrides(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		want func(*Config)
	}{
		{"string", []string{"CODEINTERP_UPSTREAM_URL=https://api.openai.com/v1/responses"}, func(c *Config) { c.Upstream.URL = "https://api.openai.com/v1/responses" }},
		{"nested", []string{"CODEINTERP_SANDBOX_LIMITS_RUN_TIMEOUT=10s"}, func(c *Config) { c.Sandbox.Limits.RunTimeout = 10 * time.Second }},
		{"empty string", []string{"CODEINTERP_SERVER_ADMIN_LISTEN=", "CODEINTERP_METRICS_ENABLED=false"}, func(c *Config) { c.Server.AdminListen = ""; c.Metrics.Enabled = false }},
		{"int", []string{"CODEINTERP_SANDBOX_MAX_SESSIONS=32"}, func(c *Config) { c.Sandbox.MaxSessions = 32 }},
		{"uint", []string{"CODEINTERP_SANDBOX_ISOLATION_UID=1000"}, func(c *Config) { c.Sandbox.Isolation.UID = 1000 }},
		{"float", []string{"CODEINTERP_SANDBOX_LIMITS_CPUS=0.25"}, func(c *Config) { c.Sandbox.Limits.CPUs = 0.25 }},
		{"size", []string{"CODEINTERP_SERVER_MAX_BODY_BYTES=32MiB"}, func(c *Config) { c.Server.MaxBodyBytes = 32 * MiB }},
		{"bool 1", []string{"CODEINTERP_METRICS_ENABLED=0", "CODEINTERP_SERVER_ADMIN_LISTEN="}, func(c *Config) { c.Metrics.Enabled = false; c.Server.AdminListen = "" }},
		{"list commas", []string{"CODEINTERP_ROUTES_PATHS=/v1/responses, /openai/v1/responses"}, func(c *Config) { c.Routes.Paths = []string{"/v1/responses", "/openai/v1/responses"} }},
		{"list flow", []string{`CODEINTERP_ROUTES_PATHS=["/a", "/b,c"]`}, func(c *Config) { c.Routes.Paths = []string{"/a", "/b,c"} }},
		{"list empty", []string{"CODEINTERP_UPSTREAM_FORWARD_HEADERS="}, func(c *Config) { c.Upstream.ForwardHeaders = []string{} }},
		{"map pairs", []string{"CODEINTERP_UPSTREAM_HEADERS=x-tenant=blue, x-env=a=b"}, func(c *Config) { c.Upstream.Headers = map[string]string{"x-tenant": "blue", "x-env": "a=b"} }},
		{"map flow", []string{`CODEINTERP_UPSTREAM_HEADERS={x-list: "a, b"}`}, func(c *Config) { c.Upstream.Headers = map[string]string{"x-list": "a, b"} }},
		{"api auth headers lowercased", []string{"CODEINTERP_API_AUTH_HEADERS=Authorization,X-Api-Token"}, func(c *Config) { c.API.AuthHeaders = []string{"authorization", "x-api-token"} }},
		{"store backend", []string{"CODEINTERP_STORE_BACKEND=redis", "CODEINTERP_STORE_REDIS_URL=redis://r:6379/1"}, func(c *Config) { c.Store.Backend = "redis"; c.Store.RedisURL = "redis://r:6379/1" }},
		{"store limit", []string{"CODEINTERP_STORE_LIMITS_OWNER_CONTAINERS=5"}, func(c *Config) { c.Store.Limits.OwnerContainers = 5 }},
		{"files source", []string{"CODEINTERP_FILES_SOURCE=off"}, func(c *Config) { c.Files.Source = "off" }},
		{"unrelated ignored", []string{"CODEINTERP_FIXTURES=/x", "PATH=/bin", "CODEINTERP_UPSTREAM_ULR=x"}, func(*Config) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := LoadEnv("", tt.env)
			if err != nil {
				t.Fatal(err)
			}
			want := Default()
			tt.want(want)
			if !reflect.DeepEqual(c, want) {
				t.Fatalf("got  %+v\nwant %+v", c, want)
			}
		})
	}
}

func TestEnvWinsOverFile(t *testing.T) {
	c, err := LoadEnv("../../testdata/config/minimal.yaml", []string{
		"CODEINTERP_SANDBOX_MAX_SESSIONS=3", "CODEINTERP_SANDBOX_WARM_WORKERS=1",
		"CODEINTERP_UPSTREAM_HEADERS=X-Other=1",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Sandbox.MaxSessions != 3 || c.Sandbox.WarmWorkers != 1 || c.Sandbox.Limits.RunTimeout != time.Minute {
		t.Errorf("env did not win over file, or file lost: %+v", c.Sandbox)
	}
	// Load lowercases header names; the env map replaces the file's map.
	if !reflect.DeepEqual(c.Upstream.Headers, map[string]string{"x-other": "1"}) {
		t.Errorf("headers = %v", c.Upstream.Headers)
	}
}

func TestEnvErrors(t *testing.T) {
	tests := []struct {
		env  string
		want [2]string
	}{
		{"CODEINTERP_SANDBOX_MAX_SESSIONS=lots", [2]string{"sandbox.max_sessions", "from CODEINTERP_SANDBOX_MAX_SESSIONS: lots is not an integer"}},
		{"CODEINTERP_METRICS_ENABLED=sometimes", [2]string{"metrics.enabled", `"sometimes" is not true or false`}},
		{"CODEINTERP_UPSTREAM_TIMEOUT=120", [2]string{"upstream.timeout", "is not a duration"}},
		{"CODEINTERP_SERVER_MAX_BODY_BYTES=1GB", [2]string{"server.max_body_bytes", "ambiguous"}},
		{"CODEINTERP_UPSTREAM_HEADERS=novalue", [2]string{"upstream.headers", "is not name=value"}},
		{"CODEINTERP_ROUTES_PATHS=[1, 2]", [2]string{"routes.paths", "item 0 must be a string"}},
		{"CODEINTERP_ROUTES_PATHS=[", [2]string{"routes.paths", "CODEINTERP_ROUTES_PATHS"}},
	}
	for _, tt := range tests {
		t.Run(tt.env, func(t *testing.T) {
			_, err := LoadEnv("", []string{tt.env})
			var le *Error
			if !errors.As(err, &le) || le.Source != "environment" {
				t.Fatalf("got %v, want a *config.Error from the environment", err)
			}
			wantFieldErrors(t, err, [][2]string{tt.want})
		})
	}
	// A valid value that makes the config invalid is a validation error.
	_, err := LoadEnv("", []string{"CODEINTERP_LOGGING_LEVEL=loud"})
	wantFieldErrors(t, err, [][2]string{{"logging.level", `"loud"`}})
}

func TestEnvVarNames(t *testing.T) {
	vars := EnvVars()
	seen := map[string]string{}
	for _, e := range vars {
		if prev, dup := seen[e.Name]; dup {
			t.Errorf("%s names both %s and %s", e.Name, prev, e.Path)
		}
		seen[e.Name] = e.Path
	}
	for name, path := range map[string]string{
		"CODEINTERP_UPSTREAM_URL":               "upstream.url",
		"CODEINTERP_SERVER_LISTEN":              "server.listen",
		"CODEINTERP_SANDBOX_LIMITS_RUN_TIMEOUT": "sandbox.limits.run_timeout",
		"CODEINTERP_SANDBOX_ISOLATION_GID":      "sandbox.isolation.gid",
	} {
		if seen[name] != path {
			t.Errorf("%s → %q, want %q", name, seen[name], path)
		}
	}
	// Each listed variable really sets its field: ApplyEnv with every name
	// reports every name applied (and fails only on values, not names).
	var env []string
	for _, e := range vars {
		env = append(env, e.Name+"=")
	}
	applied, _ := Default().ApplyEnv(env)
	if len(applied) != len(vars) {
		t.Errorf("applied %d of %d variables", len(applied), len(vars))
	}
	got := UnknownEnv([]string{"CODEINTERP_UPSTREAM_ULR=x", "CODEINTERP_RUNTIME_DIR=/r", "CODEINTERP_SERVER_LISTEN=:1", "HOME=/root", "CODEINTERP_A=1"})
	if want := []string{"CODEINTERP_A", "CODEINTERP_UPSTREAM_ULR"}; !reflect.DeepEqual(got, want) {
		t.Errorf("UnknownEnv = %v, want %v", got, want)
	}
}

func TestParseByteSize(t *testing.T) {
	good := map[string]ByteSize{
		"0": 0, "1048576": MiB, "256MiB": 256 * MiB, "256 MiB": 256 * MiB, "1GiB": GiB, "1g": GiB, "4G": 4 * GiB,
		"512Ki": 512 * KiB, "512k": 512 * KiB, "2Ti": 2 * TiB, "1.5GiB": 3 * GiB / 2, "10B": 10, "0.5KiB": 512,
	}
	for in, want := range good {
		got, err := ParseByteSize(in)
		if err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	bad := map[string]string{
		"": "want bytes", "MiB": "want bytes", "-1": "want bytes", "1MB": "ambiguous", "1gb": "ambiguous",
		"1.1B": "whole number", "1x": "unknown unit", "1.2.3": "want bytes", "99999999999TiB": "out of range",
		"9223372036854775808": "out of range",
	}
	for in, want := range bad {
		if _, err := ParseByteSize(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseByteSize(%q) error %v, want one containing %q", in, err, want)
		}
	}
	for _, b := range []ByteSize{0, 1, 1023, KiB, 1536, 256 * MiB, 3 * GiB, 2 * TiB} {
		back, err := ParseByteSize(b.String())
		if err != nil || back != b {
			t.Errorf("%d → %q → %d, %v", b, b.String(), back, err)
		}
	}
}

func TestEnvVarsSorted(t *testing.T) {
	// Declaration order, so docs list sections as the YAML file does.
	var sections []string
	for _, e := range EnvVars() {
		s, _, _ := strings.Cut(e.Path, ".")
		if len(sections) == 0 || sections[len(sections)-1] != s {
			sections = append(sections, s)
		}
	}
	want := []string{"server", "routes", "interceptor", "upstream", "sandbox", "api", "store", "responses", "conversations", "files", "containers", "checkpoints", "cluster", "logging", "metrics", "telemetry"}
	if !reflect.DeepEqual(sections, want) {
		t.Errorf("sections %v, want %v", sections, want)
	}
}

// TestGVisorProviderDefaults: `provider: gvisor` alone gives limits a
// gVisor sandbox can start with; fields the operator set are kept, and
// values too small for gVisor are named.
func TestGVisorProviderDefaults(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c, err := LoadEnv(write("sandbox:\n  provider: gvisor\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	l := c.Sandbox.Limits
	if l.GuestMemory != 1*GiB || l.MaxGuestMemory != 4*GiB || l.WorkerOverhead != 256*MiB || l.Pids != 512 || c.Interceptor.MaxMemoryLimit != 4*GiB {
		t.Errorf("gvisor defaults not applied: %+v, max_memory_limit %s", l, c.Interceptor.MaxMemoryLimit)
	}
	if c.Checkpoints.After != 10*time.Second {
		t.Errorf("gvisor checkpoints.after %s, want 10s", c.Checkpoints.After)
	}
	if c, err := LoadEnv(write("sandbox:\n  provider: gvisor\ncheckpoints:\n  after: 3s\n"), nil); err != nil || c.Checkpoints.After != 3*time.Second {
		t.Errorf("the operator's checkpoints.after not kept: %v %v", c.Checkpoints.After, err)
	}
	c, err = LoadEnv(write("sandbox:\n  provider: gvisor\n  limits:\n    guest_memory: 512MiB\n    pids: 300\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Sandbox.Limits.GuestMemory != 512*MiB || c.Sandbox.Limits.Pids != 300 || c.Sandbox.Limits.MaxGuestMemory != 4*GiB {
		t.Errorf("operator's values not kept: %+v", c.Sandbox.Limits)
	}
	_, err = LoadEnv(write("sandbox:\n  provider: gvisor\n  limits:\n    pids: 100\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "sandbox.limits.pids") {
		t.Errorf("pids 100 for gvisor: %v, want an error naming sandbox.limits.pids", err)
	}
	// The WASM provider keeps its own defaults.
	c, err = LoadEnv(write("sandbox:\n  provider: wasm\n"), nil)
	if err != nil || c.Sandbox.Limits.Pids != 64 || c.Sandbox.Limits.GuestMemory != 256*MiB {
		t.Errorf("wasm defaults changed: %+v, %v", c.Sandbox.Limits, err)
	}
}

// gvisorNet turns the network feature on with domains, on the gVisor
// provider (with the limits it needs).
func gvisorNet(c *Config, domains ...string) {
	c.Sandbox.Provider = ProviderGVisor
	c.Sandbox.Limits.Pids = 512
	c.Sandbox.Limits.GuestMemory = GiB
	c.Sandbox.Network.AllowedDomains = domains
}
