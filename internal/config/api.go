package config

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// API is the HTTP server of OpenAI's Containers and Files APIs (package
// api), on its own listener: Envoy routes /v1/containers and /v1/files to
// it.
type API struct {
	// Listen is the HTTP address (host:port). "" disables the API. The
	// default binds loopback only: Envoy is the front door.
	Listen string `json:"listen"`
	// AuthHeaders name the request headers whose values identify the
	// caller: what one credential creates, another cannot see (stored
	// lowercase).
	AuthHeaders []string `json:"auth_headers"`
	// Anonymous is what a request without a credential (none of
	// auth_headers, or only empty ones such as "Bearer ") gets: "reject"
	// (OpenAI's 401 "You didn't provide an API key.", on the Containers and
	// Files APIs and on /v1/responses that use the code interpreter) or
	// "shared" (all such requests share one owner: whatever one makes,
	// every other can read and delete; for a single-user laptop).
	Anonymous string `json:"anonymous"`
	// MaxUploadBytes bounds one uploaded file (413 above); at most
	// store.limits.file_bytes. 0 (the default) is the file bound in force.
	MaxUploadBytes ByteSize `json:"max_upload_bytes"`
	// DefaultExpiry is a new container's expires_after when the client
	// gives none (OpenAI's 20 minutes after last use); whole minutes.
	DefaultExpiry time.Duration `json:"default_expiry"`
	// MaxExpiry is the longest expires_after a client may ask for.
	MaxExpiry time.Duration `json:"max_expiry"`
}

// Store is where containers and files are kept (package store).
type Store struct {
	// Backend is "memory" (in-process: one replica) or "redis" (shared by
	// every replica; needs redis_url).
	Backend string `json:"backend"`
	// RedisURL is redis://[user:password@]host:port/db (rediss:// for TLS);
	// used with backend: redis only.
	RedisURL string      `json:"redis_url"`
	Limits   StoreLimits `json:"limits"`
}

// StoreLimits bound what the store holds (store.Limits). FileBytes and
// ContainerBytes 0 (the defaults) are what one sandbox session holds —
// every interpreter a container gets has all its files copied in — and a
// value set above that is lowered to it, with a warning (cmd/extproc
// computes the bounds in force).
type StoreLimits struct {
	FileBytes       ByteSize      `json:"file_bytes"`
	ContainerBytes  ByteSize      `json:"container_bytes"`
	ContainerFiles  int           `json:"container_files"`
	OwnerBytes      ByteSize      `json:"owner_bytes"`
	OwnerContainers int           `json:"owner_containers"`
	OwnerFiles      int           `json:"owner_files"`
	FileLifetime    time.Duration `json:"file_lifetime"`
	ExpiredMemory   time.Duration `json:"expired_memory"`
}

// Files says where Files API file ids come from.
type Files struct {
	// Source is "local" (this server's /v1/files), "upstream" (the model
	// provider's Files API: Envoy routes /v1/files there, and this server
	// fetches file ids from upstream_url with the caller's credential) or
	// "off" (no Files API; file_ids are refused).
	Source string `json:"source"`
	// UpstreamURL is the upstream's API base, e.g. https://api.openai.com/v1
	// (source: upstream only).
	UpstreamURL string `json:"upstream_url"`
}

// The store backends, files sources and anonymous policies.
const (
	AnonymousReject = "reject"
	AnonymousShared = "shared"

	StoreMemory   = "memory"
	StoreRedis    = "redis"
	FilesLocal    = "local"
	FilesUpstream = "upstream"
	FilesOff      = "off"
)

func defaultAPI() API {
	return API{
		Listen:        "127.0.0.1:8081",
		AuthHeaders:   []string{"authorization", "api-key"},
		Anonymous:     AnonymousReject,
		DefaultExpiry: 20 * time.Minute, // OpenAI's
		MaxExpiry:     time.Hour,
	}
}

func defaultStore() Store {
	return Store{
		Backend:  StoreMemory,
		RedisURL: "redis://127.0.0.1:6379/0",
		Limits: StoreLimits{
			ContainerFiles:  256,
			OwnerBytes:      1 * GiB,
			OwnerContainers: 64,
			OwnerFiles:      1000,
			FileLifetime:    24 * time.Hour,
			ExpiredMemory:   24 * time.Hour,
		},
	}
}

func defaultFiles() Files { return Files{Source: FilesLocal} }

func (c *Config) validateAPI(v *validator) {
	a := c.API
	if a.Listen != "" {
		checkAddr(v, "api.listen", a.Listen)
		for _, other := range []struct{ path, addr string }{{"server.listen", c.Server.Listen}, {"server.admin_listen", c.Server.AdminListen}} {
			// Port 0 (any free port, as in tests) never collides.
			v.check(a.Listen != other.addr || strings.HasSuffix(a.Listen, ":0"), "api.listen", "must differ from %s", other.path)
		}
	}
	v.check(len(a.AuthHeaders) > 0, "api.auth_headers", "must name at least one header (the caller's credential)")
	seen := map[string]bool{}
	for i, h := range a.AuthHeaders {
		p := fmt.Sprintf("api.auth_headers[%d]", i)
		l := strings.ToLower(h)
		switch {
		case !tokenRE.MatchString(h):
			v.add(p, "%q is not a valid header name", h)
		case seen[l]:
			v.add(p, "%q is listed twice", h)
		}
		seen[l] = true
	}
	v.check(a.Anonymous == AnonymousReject || a.Anonymous == AnonymousShared, "api.anonymous", "%q is not one of reject, shared", a.Anonymous)
	if fb := c.Store.Limits.FileBytes; a.MaxUploadBytes != 0 {
		v.check(a.MaxUploadBytes >= KiB && (fb == 0 || a.MaxUploadBytes <= fb), "api.max_upload_bytes",
			"%s must be 0 (the file bound) or between 1KiB and store.limits.file_bytes %s", a.MaxUploadBytes, fb)
	}
	checkMinutes(v, "api.default_expiry", a.DefaultExpiry)
	checkMinutes(v, "api.max_expiry", a.MaxExpiry)
	v.check(a.MaxExpiry >= a.DefaultExpiry, "api.max_expiry", "%s is shorter than api.default_expiry %s", a.MaxExpiry, a.DefaultExpiry)
	v.check(a.MaxExpiry <= 30*24*time.Hour, "api.max_expiry", "%s must be at most 720h (30 days)", a.MaxExpiry)
}

// checkMinutes: OpenAI's expires_after counts whole minutes.
func checkMinutes(v *validator, path string, d time.Duration) {
	v.check(d >= time.Minute && d%time.Minute == 0, path, "%s must be a whole number of minutes, at least 1m", d)
}

func (c *Config) validateStore(v *validator) {
	s := c.Store
	switch s.Backend {
	case StoreMemory:
	case StoreRedis:
		u, err := url.Parse(s.RedisURL)
		switch {
		case s.RedisURL == "":
			v.add("store.redis_url", "must be set with store.backend: redis")
		case err != nil:
			v.add("store.redis_url", "is not a URL: %v", err)
		case u.Scheme != "redis" && u.Scheme != "rediss":
			v.add("store.redis_url", "must be a redis:// or rediss:// URL")
		case u.Host == "":
			v.add("store.redis_url", "has no host")
		}
	default:
		v.add("store.backend", "%q is not one of memory, redis", s.Backend)
	}
	l := s.Limits
	v.check(l.FileBytes == 0 || l.FileBytes >= KiB && l.FileBytes <= 4*GiB, "store.limits.file_bytes", "%s must be 0 (what a session holds) or between 1KiB and 4GiB", l.FileBytes)
	v.check(l.ContainerBytes == 0 || l.ContainerBytes >= l.FileBytes, "store.limits.container_bytes", "%s is below store.limits.file_bytes %s", l.ContainerBytes, l.FileBytes)
	v.check(l.OwnerBytes >= l.ContainerBytes && l.OwnerBytes >= l.FileBytes && l.OwnerBytes >= MiB, "store.limits.owner_bytes",
		"%s must be at least 1MiB and not below store.limits.container_bytes %s", l.OwnerBytes, l.ContainerBytes)
	v.check(l.ContainerFiles >= 1 && l.ContainerFiles <= 100000, "store.limits.container_files", "%d must be between 1 and 100000", l.ContainerFiles)
	v.check(l.OwnerContainers >= 1 && l.OwnerContainers <= 100000, "store.limits.owner_containers", "%d must be between 1 and 100000", l.OwnerContainers)
	v.check(l.OwnerFiles >= 1 && l.OwnerFiles <= 100000, "store.limits.owner_files", "%d must be between 1 and 100000", l.OwnerFiles)
	// OpenAI's Files API accepts lifetimes of one hour to thirty days.
	v.check(l.FileLifetime >= time.Hour && l.FileLifetime <= 30*24*time.Hour, "store.limits.file_lifetime", "%s must be between 1h and 720h", l.FileLifetime)
	v.check(l.ExpiredMemory >= 0 && l.ExpiredMemory <= 30*24*time.Hour, "store.limits.expired_memory", "%s must be between 0 and 720h", l.ExpiredMemory)
}

func (c *Config) validateFiles(v *validator) {
	f := c.Files
	switch f.Source {
	case FilesLocal, FilesOff:
	case FilesUpstream:
		u, err := url.Parse(f.UpstreamURL)
		switch {
		case f.UpstreamURL == "":
			v.add("files.upstream_url", "must be set with files.source: upstream (e.g. https://api.openai.com/v1)")
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			v.add("files.upstream_url", "%q must be an absolute http:// or https:// URL", f.UpstreamURL)
		case u.User != nil:
			v.add("files.upstream_url", "must not carry credentials: the caller's own credential is forwarded")
		}
	default:
		v.add("files.source", "%q is not one of local, upstream, off", f.Source)
	}
}
