// Package store keeps containers and files — OpenAI's Containers and Files
// API objects and their bytes — for the API (package api) and for the
// interceptor's container manager. Two implementations: store/memory (the
// default: in-process, nothing to install) and store/redis (shared by
// several replicas).
//
// Every object belongs to an owner: an opaque hash of the credential the
// client sent (see Owner). A store never returns an object to another
// owner; to that owner it does not exist (ErrNotFound).
package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
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
}

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

	// PutFile stores a file's metadata and bytes (f.Bytes is set from
	// data) and returns what it stored. A container file replaces the
	// container's file of the same Path, keeping its id and created_at.
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

// Owner hashes the credential a client sent — the values of the named
// headers (e.g. authorization, api-key), in order — into the opaque owner
// of what it creates. The credential itself is never stored. Requests that
// carry none of the headers share one owner: put the API behind a gateway
// that requires a credential.
func Owner(h http.Header, names []string) string {
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
	return "o_" + hex.EncodeToString(sum.Sum(nil))[:32]
}

// NewID returns prefix followed by 48 random hex digits (192 bits), the
// length of OpenAI's container ids.
func NewID(prefix string) string {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("store: crypto/rand: %v", err))
	}
	return prefix + hex.EncodeToString(b[:])
}

// ValidID reports whether id can name a stored object: 1 to 128 ASCII
// letters, digits, '_', '-' or '.' (NewID's ids and OpenAI's). Stores
// refuse to create other ids and report them not found, so a client's
// path segment can never reach into a backend's key syntax.
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
