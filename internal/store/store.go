// Package store keeps containers and files — OpenAI's Containers and Files
// API objects and their bytes — for the API (package api) and for the
// interceptor's container manager, the responses and conversations the
// interceptor continues (Responses, Conversations), and the skills
// containers mount (Skills). Two implementations of
// each: store/memory (the default: in-process, nothing to install) and
// store/redis (shared by several replicas).
//
// Every object belongs to an owner: an opaque hash of the credential the
// client sent (see Owner). A store never returns an object to another
// owner; to that owner it does not exist (ErrNotFound).
package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Container is one container's metadata.
type Container struct {
	ID    string `json:"id"`
	Owner string `json:"owner"`
	Name  string `json:"name"`
	// CreatedAt and LastActiveAt are Unix seconds.
	CreatedAt    int64 `json:"created_at"`
	LastActiveAt int64 `json:"last_active_at"`
	// ExpiresAfterMinutes after LastActiveAt the container expires: its
	// files are gone and it cannot be used again.
	ExpiresAfterMinutes int `json:"expires_after_minutes"`
	// MemoryLimit is OpenAI's string ("1g", "4g", ...).
	MemoryLimit string `json:"memory_limit"`
	// Origin is how the container was made: OriginAPI (POST
	// /v1/containers) or OriginAuto (a response's {"type": "auto"}). Only
	// auto containers are ever deleted to make room for another; a record
	// without one (written before the field existed) counts as made
	// through the API, so it is never recycled.
	Origin string `json:"origin,omitempty"`
	// Network is the container's network_policy allowlist for life (nil:
	// disabled). It never holds a secret's value: those live only in the
	// memory of the server that made the container (containers.Manager).
	Network *NetworkPolicy `json:"network,omitempty"`
	// Skills are mounted in the container for life (package skills), in
	// this order.
	Skills []ContainerSkill `json:"skills,omitempty"`
}

// ContainerSkill is one skill version a container mounts: a Skills store
// entry (an inline skill's belongs to the container: Skill.Container).
type ContainerSkill struct {
	SkillID     string `json:"skill_id"`
	Version     int    `json:"version"`
	Name        string `json:"name"`
	Description string `json:"description"`
}

// NetworkPolicy is what a store keeps of a container's allowlist: the
// domains, and which secrets it has (domain and name, never the value).
type NetworkPolicy struct {
	AllowedDomains []string    `json:"allowed_domains"`
	Secrets        []SecretRef `json:"secrets,omitempty"`
}

// SecretRef names one domain secret of a container.
type SecretRef struct {
	Domain string `json:"domain"`
	Name   string `json:"name"`
}

// The origins of a container (Container.Origin).
const (
	OriginAPI  = "api"
	OriginAuto = "auto"
)

// Recyclable reports whether the container may be deleted to make room
// for another auto container: only one a response made itself.
func (c Container) Recyclable() bool { return c.Origin == OriginAuto }

// ExpiresAt is when the container expires unless used before.
func (c Container) ExpiresAt() time.Time {
	return time.Unix(c.LastActiveAt, 0).Add(time.Duration(c.ExpiresAfterMinutes) * time.Minute)
}

// Expired reports whether the container has expired at now.
func (c Container) Expired(now time.Time) bool { return !now.Before(c.ExpiresAt()) }

// File is a container file (ContainerID set) or a Files API file
// (ContainerID empty).
type File struct {
	ID          string `json:"id"`
	Owner       string `json:"owner"`
	ContainerID string `json:"container_id,omitempty"`
	// Path is the file's path in the container (/mnt/data/...); empty for
	// Files API files.
	Path string `json:"path,omitempty"`
	// Filename is the base name the client gave or the code wrote.
	Filename  string `json:"filename"`
	Bytes     int64  `json:"bytes"`
	CreatedAt int64  `json:"created_at"`
	// Source is "user" or "assistant" (container files).
	Source string `json:"source,omitempty"`
	// Purpose is the Files API purpose ("assistants", "user_data", ...).
	Purpose string `json:"purpose,omitempty"`
	// ExpiresAt is the Unix second a Files API file expires (0: with the
	// store's lifetime rules only).
	ExpiresAt int64 `json:"expires_at,omitempty"`
	// Revision changes with every PutFile, a replacement of the same path
	// too (which keeps ID): it tells a copy of the file (an interpreter's
	// /mnt/data) whether it is still current. Stores set it; a record
	// written before revisions existed has none until it is replaced.
	Revision string `json:"revision,omitempty"`
}

// ListOptions select one page of a listing, as OpenAI's list endpoints do.
type ListOptions struct {
	Limit int    // 1..100; 0 means DefaultListLimit, larger values are clamped
	Order string // "asc" or "desc" (by creation, then id); "" means "desc"
	// After is an id: the page holds the items strictly after it in the
	// order. An id the listing does not know (never existed, deleted,
	// forgotten) gives an empty page, as OpenAI's API does, rather than
	// restarting from the beginning (which would loop a pager forever).
	After string
	Name  string // containers only: exact name
}

// Listing bounds, as OpenAI's list endpoints have them.
const (
	DefaultListLimit = 20
	MaxListLimit     = 100
)

// Normalize fills ListOptions' defaults (limit 20, order desc) and clamps
// Limit to 1..100; an Order other than "asc" or "desc" is an error.
func (o ListOptions) Normalize() (ListOptions, error) {
	switch {
	case o.Limit == 0:
		o.Limit = DefaultListLimit
	case o.Limit < 1:
		o.Limit = 1
	case o.Limit > MaxListLimit:
		o.Limit = MaxListLimit
	}
	switch o.Order {
	case "":
		o.Order = "desc"
	case "asc", "desc":
	default:
		return o, fmt.Errorf("store: list order %q: want asc or desc", o.Order)
	}
	return o, nil
}

// Store keeps containers and files. Implementations are safe for
// concurrent use; each method is atomic (a failed write leaves nothing
// behind).
type Store interface {
	// PutContainer creates or replaces a container.
	PutContainer(ctx context.Context, c Container) error
	// GetContainer returns a container, expired or not (callers decide),
	// while the store still remembers it; ErrNotFound otherwise.
	GetContainer(ctx context.Context, owner, id string) (Container, error)
	// TouchContainer sets LastActiveAt to now (refreshing the expiry of
	// the container and its files); ErrExpired if it has expired.
	TouchContainer(ctx context.Context, owner, id string, now time.Time) (Container, error)
	// ListContainers lists the owner's containers that have not expired
	// (ListOptions.Normalize gives the defaults; an unknown After is an
	// empty page).
	ListContainers(ctx context.Context, owner string, o ListOptions) (page []Container, hasMore bool, err error)
	// DeleteContainer removes a container and its files (an expired one
	// too, while it is remembered).
	DeleteContainer(ctx context.Context, owner, id string) error
	// ReviveContainer is TouchContainer for a container that may have
	// expired: one whose files are still kept (Limits.ExpiredKeep) is
	// live again from now, with them, counted against the owner's
	// containers again (a *QuotaError when that is full). ErrExpired once
	// its files are gone, ErrNotFound once it is forgotten.
	ReviveContainer(ctx context.Context, owner, id string, now time.Time) (Container, error)

	// PutFile stores a file's metadata and bytes (f.Bytes is set from
	// data, f.Revision made anew) and returns what it stored. A container
	// file replaces the container's file of the same Path, keeping its id
	// and created_at. A container's paths form a tree, as a file system's
	// do: a path that is a directory of another file of the container, or
	// lies below one, is a *PathConflictError.
	// The container must exist (ErrNotFound) and not be expired
	// (ErrExpired); PutFile does not touch it. Defaults: an id (cfile_… or
	// file-…) when f.ID is empty, CreatedAt now, a container file's Path
	// /mnt/data/<Filename> (or Filename the Path's base), a Files API
	// file's ExpiresAt now+Limits.FileLifetime.
	PutFile(ctx context.Context, f File, data []byte) (File, error)
	// GetFile returns a file's metadata; containerID is "" for Files API
	// files. For a file of an expired container it is ErrExpired (the
	// container is remembered, its files are gone); so are FileContent,
	// ListFiles and DeleteFile.
	GetFile(ctx context.Context, owner, containerID, id string) (File, error)
	// FileContent returns a file's bytes.
	FileContent(ctx context.Context, owner, containerID, id string) ([]byte, error)
	// ListFiles lists a container's files ("" for the owner's Files API files).
	ListFiles(ctx context.Context, owner, containerID string, o ListOptions) (page []File, hasMore bool, err error)
	// DeleteFile removes a file.
	DeleteFile(ctx context.Context, owner, containerID, id string) error

	// Close releases the store's resources.
	Close() error
}

// Errors callers branch on (errors.Is).
var (
	ErrNotFound = errors.New("store: not found")
	ErrExpired  = errors.New("store: container expired")
	// ErrUnavailable: the store could not be reached or did not answer
	// in time (a network error, a timeout, a server that is down): the
	// request may succeed later, and callers answer it with a retryable
	// error, never as if what was asked for did not exist.
	ErrUnavailable = errors.New("store: unavailable")
	// ErrEventsTrimmed: a background response's events are no longer
	// kept — the store's bound on all logs (BackgroundAllBytes) forgot
	// them, those of runs that ended longest ago first — though its
	// record is: its stream cannot be resumed.
	ErrEventsTrimmed = errors.New("store: the response's events are no longer kept")
)

// QuotaError reports a bound the operator set (errors.As). A store writes
// nothing when it returns one.
type QuotaError struct {
	Limit string // one of the Limit* names
	Max   int64
}

// QuotaError.Limit names: one per field of Limits, and LimitStoreMemory for
// a backend that is itself full (Redis at its maxmemory).
const (
	LimitFileBytes       = "file_bytes"
	LimitContainerBytes  = "container_bytes"
	LimitContainerFiles  = "container_files"
	LimitOwnerBytes      = "owner_bytes"
	LimitOwnerContainers = "owner_containers"
	LimitOwnerFiles      = "owner_files"
	LimitStoreMemory     = "store_memory"
)

// PathConflictError reports a container file that cannot be stored at
// Path because another file of the container, Other, makes it impossible
// in a file system: Other is Path's parent directory's place, or lies below
// Path (errors.As). A store writes nothing when it returns one.
type PathConflictError struct {
	Path  string // the path asked for
	Other string // the container's file in the way
}

func (e *PathConflictError) Error() string {
	if strings.HasPrefix(e.Other, e.Path+"/") {
		return fmt.Sprintf("store: %s is a directory in the container (it holds %s)", e.Path, e.Other)
	}
	return fmt.Sprintf("store: %s cannot be stored: %s is a file, not a directory", e.Path, e.Other)
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("store: the %s limit (%d) would be exceeded", e.Limit, e.Max)
}

// Limits bound what a store holds. A zero bound is no bound; a zero
// FileLifetime keeps Files API files until deleted (unless File.ExpiresAt
// says otherwise); a zero ExpiredMemory forgets a container when it
// expires.
type Limits struct {
	FileBytes       int64 // one file
	ContainerBytes  int64 // all files of one container
	ContainerFiles  int   // files in one container
	OwnerBytes      int64 // all bytes of one owner (containers and Files API files)
	OwnerContainers int   // live containers of one owner
	OwnerFiles      int   // Files API files of one owner
	// FileLifetime is how long a Files API file lives after its upload.
	FileLifetime time.Duration
	// ExpiredMemory is how long an expired container is remembered (so
	// using it is "Container is expired." rather than "not found").
	ExpiredMemory time.Duration
	// ExpiredKeep is how long an expired container's files are kept
	// after it expired, for ReviveContainer (0: dropped at expiry, as
	// OpenAI does). They count against the owner's bytes meanwhile, not
	// its containers. At most ExpiredMemory.
	ExpiredKeep time.Duration
}

// DefaultLimits are the documented defaults.
func DefaultLimits() Limits {
	return Limits{
		FileBytes:       64 << 20,
		ContainerBytes:  256 << 20,
		ContainerFiles:  256,
		OwnerBytes:      1 << 30,
		OwnerContainers: 64,
		OwnerFiles:      1000,
		FileLifetime:    24 * time.Hour,
		ExpiredMemory:   24 * time.Hour,
	}
}

// DefaultAuthHeaders are the headers whose values identify a caller unless
// configured otherwise: where OpenAI's clients send their API key. A
// fresh slice each call.
func DefaultAuthHeaders() []string { return []string{"authorization", "api-key"} }

// Owner hashes the credential a client sent — the values of the named
// headers (e.g. authorization, api-key), in order — into the opaque owner
// of what it creates. The credential itself is never stored.
//
// ok is false for a request that carries no credential: none of the
// headers, or only values with nothing in them ("Bearer " with nothing
// after it). Such requests all get the one anonymous owner; callers refuse
// them unless the operator chose to let them share it (api.anonymous).
//
// An Anthropic client's x-api-key is the credential it would send as a
// Bearer token: a request with x-api-key and no authorization header has
// the owner of "Authorization: Bearer <key>" (unless the operator names
// x-api-key among the headers itself), so one key owns the same containers
// and files through both APIs.
func Owner(h http.Header, names []string) (owner string, ok bool) {
	h = apiKeyAsBearer(h, names)
	for _, n := range names {
		for _, v := range h.Values(n) {
			if credentialValue(v) {
				ok = true
			}
		}
	}
	if !ok {
		h = nil // "Bearer " and no header at all are the same nobody
	}
	sum := sha256.New()
	for _, n := range names {
		sum.Write([]byte(strings.ToLower(n)))
		sum.Write([]byte{0})
		for _, v := range h.Values(n) {
			sum.Write([]byte(v))
			sum.Write([]byte{0})
		}
		sum.Write([]byte{1})
	}
	return "o_" + hex.EncodeToString(sum.Sum(nil))[:32], ok
}

// credentialValue reports whether a header value holds a credential:
// something other than blanks, once an authorization scheme word (Bearer,
// Basic, ...) is set aside.
func credentialValue(v string) bool {
	v = strings.TrimSpace(v)
	if scheme, rest, _ := strings.Cut(v, " "); isScheme(scheme) {
		v = strings.TrimSpace(rest)
	}
	return v != ""
}

// isScheme reports whether w is an HTTP authorization scheme a credential
// follows.
func isScheme(w string) bool {
	switch strings.ToLower(w) {
	case "bearer", "basic", "token", "apikey", "api-key":
		return true
	}
	return false
}

// AttachedName is the name a Files API file gets in a container:
// <file_id>-<filename>, as OpenAI mounts them. A name that would be longer
// than MaxNameBytes is shortened, keeping its extension: the server's own
// uploads are refused before that (api), but another provider's Files API
// (files.source: upstream) has its own bounds.
func AttachedName(fileID, filename string) string {
	name := fileID + "-" + filename
	if len(name) <= MaxNameBytes {
		return name
	}
	ext := path.Ext(filename)
	if len(ext) > 16 || len(ext) >= len(filename) {
		ext = ""
	}
	stem := name[:len(name)-len(ext)]
	stem = stem[:MaxNameBytes-len(ext)]
	for !utf8.ValidString(stem) { // cut inside a character: drop its start
		stem = stem[:len(stem)-1]
	}
	return stem + ext
}

// BaseName is the last element of a file name a client sent, which may be
// a path, a Windows one too: what follows the last '/' or '\'.
func BaseName(name string) string { return name[strings.LastIndexAny(name, "/\\")+1:] }

// MaxNameBytes is the longest file name a file system holds (Linux's
// NAME_MAX): a container file's every path component is at most this.
const MaxNameBytes = 255

// CheckFilename reports why name cannot be a file's name, or nil: it must
// be 1 to max bytes of UTF-8, not "." or "..", without '/' or '\', and
// without the characters that hide or reshape text rather than show it —
// Unicode's categories Cc (controls, U+0085 too), Cf (format: bidi
// overrides such as U+202E, zero-width characters), Zl and Zp (U+2028,
// U+2029). Such a name would show one thing to a user and another to a
// file system, or break the line it is written on.
func CheckFilename(name string, max int) error {
	switch {
	case name == "" || name == "." || name == "..":
		return errors.New("a file name must not be empty, \".\" or \"..\"")
	case len(name) > max:
		return fmt.Errorf("a file name is at most %d bytes, this one is %d", max, len(name))
	case !utf8.ValidString(name):
		return errors.New("a file name must be UTF-8")
	}
	for _, r := range name {
		switch {
		case r == '/' || r == '\\':
			return fmt.Errorf("a file name must not contain %q", r)
		case unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp):
			return fmt.Errorf("a file name must not contain control, format or line-separator characters (%U)", r)
		}
	}
	return nil
}

// ValidID reports whether id can name a stored object: 1 to 128 ASCII
// letters, digits, '_', '-' or '.' (the ids package's ids and OpenAI's).
// Stores refuse to create other ids and report them not found, so a
// client's path segment can never reach into a backend's key syntax.
func ValidID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// OwnerBytes is a Store that tells what an owner holds: the bytes of its
// live containers' files (and of expired ones kept for restore) and of its
// Files API files — what Limits.OwnerBytes bounds.
type OwnerBytes interface {
	OwnerBytes(ctx context.Context, owner string) (int64, error)
}

// apiKeyAsBearer is h with x-api-key as authorization's Bearer token, when
// names count authorization but not x-api-key and h has no authorization.
func apiKeyAsBearer(h http.Header, names []string) http.Header {
	key := strings.TrimSpace(h.Get("x-api-key"))
	if key == "" || h.Get("authorization") != "" {
		return h
	}
	auth := false
	for _, n := range names {
		switch strings.ToLower(n) {
		case "x-api-key":
			return h
		case "authorization":
			auth = true
		}
	}
	if !auth {
		return h
	}
	h = h.Clone()
	h.Del("x-api-key")
	h.Set("authorization", "Bearer "+key)
	return h
}
