package config

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/codeinterp/codeinterp/internal/api"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/store"
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
	// store.limits.file_bytes. The bound in force is lower when a session
	// could not hold such a file (Config.StoreLimits).
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

// StoreLimits bound what the store holds (store.Limits; Config.StoreLimits
// gives the bounds in force).
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
		Listen:         "127.0.0.1:8081",
		AuthHeaders:    store.DefaultAuthHeaders(),
		Anonymous:      AnonymousReject,
		MaxUploadBytes: api.DefaultMaxUploadBytes,
		DefaultExpiry:  api.DefaultExpiryMinutes * time.Minute,
		MaxExpiry:      time.Hour,
	}
}

func defaultStore() Store {
	l := store.DefaultLimits()
	return Store{
		Backend:  StoreMemory,
		RedisURL: "redis://127.0.0.1:6379/0",
		Limits: StoreLimits{
			FileBytes:       ByteSize(l.FileBytes),
			ContainerBytes:  ByteSize(l.ContainerBytes),
			ContainerFiles:  l.ContainerFiles,
			OwnerBytes:      ByteSize(l.OwnerBytes),
			OwnerContainers: l.OwnerContainers,
			OwnerFiles:      l.OwnerFiles,
			FileLifetime:    l.FileLifetime,
			ExpiredMemory:   l.ExpiredMemory,
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
	v.check(a.MaxUploadBytes >= KiB && a.MaxUploadBytes <= c.Store.Limits.FileBytes, "api.max_upload_bytes",
		"%s must be between 1KiB and store.limits.file_bytes %s", a.MaxUploadBytes, c.Store.Limits.FileBytes)
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
	v.check(l.FileBytes >= KiB && l.FileBytes <= 4*GiB, "store.limits.file_bytes", "%s must be between 1KiB and 4GiB", l.FileBytes)
	v.check(l.ContainerBytes >= l.FileBytes, "store.limits.container_bytes", "%s is below store.limits.file_bytes %s", l.ContainerBytes, l.FileBytes)
	v.check(l.OwnerBytes >= l.ContainerBytes, "store.limits.owner_bytes", "%s is below store.limits.container_bytes %s", l.OwnerBytes, l.ContainerBytes)
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

// StoreLimits are store.limits as the store enforces them: file_bytes and
// container_bytes lowered to what one sandbox session can hold. Every
// interpreter a container gets has all its files copied in, within the
// session's scratch space (sandbox.limits.scratch_bytes, less a page per
// file: sandbox.DataCapacity) and one file at most sandbox.MaxFileBytes; a
// container holding more would fail every run. So an upload or a code's
// file past them is refused when it is made (413), never when it is used.
func (c *Config) StoreLimits() store.Limits {
	l := c.Store.Limits
	capacity := sandbox.DataCapacity(int64(c.Sandbox.Limits.ScratchBytes), l.ContainerFiles)
	s := store.Limits{
		FileBytes:       min(int64(l.FileBytes), sandbox.MaxFileBytes, capacity),
		ContainerBytes:  min(int64(l.ContainerBytes), capacity),
		ContainerFiles:  l.ContainerFiles,
		OwnerBytes:      int64(l.OwnerBytes),
		OwnerContainers: l.OwnerContainers,
		OwnerFiles:      l.OwnerFiles,
		FileLifetime:    l.FileLifetime,
		ExpiredMemory:   l.ExpiredMemory,
		ExpiredKeep:     c.expiredKeep(),
	}
	// Remembered as long after its files are gone as without them.
	s.ExpiredMemory += s.ExpiredKeep
	return s
}

// expiredKeep is how long an expired container's files are kept:
// checkpoints.ttl with containers.restore_expired, else not at all.
func (c *Config) expiredKeep() time.Duration {
	if !c.Containers.RestoreExpired {
		return 0
	}
	return c.Checkpoints.TTL
}

// MaxUploadBytes is api.max_upload_bytes as the API enforces it: at most
// StoreLimits().FileBytes.
func (c *Config) MaxUploadBytes() int64 {
	return min(int64(c.API.MaxUploadBytes), c.StoreLimits().FileBytes)
}

// LoweredLimits says, one line each, which configured bounds StoreLimits
// and MaxUploadBytes lower, for the log at start and validate-config; none
// when the configuration's limits agree with the sandbox.
func (c *Config) LoweredLimits() []string {
	l, in := c.StoreLimits(), c.Store.Limits
	var out []string
	why := fmt.Sprintf("what one session holds (sandbox.limits.scratch_bytes %s for %d files, and at most %s a file)",
		c.Sandbox.Limits.ScratchBytes, in.ContainerFiles, ByteSize(sandbox.MaxFileBytes))
	if l.FileBytes < int64(in.FileBytes) {
		out = append(out, fmt.Sprintf("store.limits.file_bytes %s is lowered to %s: %s", in.FileBytes, ByteSize(l.FileBytes), why))
	}
	if l.ContainerBytes < int64(in.ContainerBytes) {
		out = append(out, fmt.Sprintf("store.limits.container_bytes %s is lowered to %s: %s", in.ContainerBytes, ByteSize(l.ContainerBytes), why))
	}
	if up := c.MaxUploadBytes(); up < int64(c.API.MaxUploadBytes) {
		out = append(out, fmt.Sprintf("api.max_upload_bytes %s is lowered to %s, the file bound in force", c.API.MaxUploadBytes, ByteSize(up)))
	}
	return out
}
