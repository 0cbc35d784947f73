package api

import (
	"time"

	"github.com/codeinterp/codeinterp/internal/netpolicy"
	"github.com/codeinterp/codeinterp/internal/store"
)

// The OpenAI objects, field for field as openai-go v3 decodes them
// (ContainerNewResponse, ContainerFileNewResponse, FileObject) and as the
// recordings show them.

type expiresAfter struct {
	Anchor  string `json:"anchor"`
	Minutes int    `json:"minutes"`
}

type containerObject struct {
	ID           string       `json:"id"`
	Object       string       `json:"object"`
	CreatedAt    int64        `json:"created_at"`
	Status       string       `json:"status"`
	ExpiresAfter expiresAfter `json:"expires_after"`
	LastActiveAt int64        `json:"last_active_at"`
	MemoryLimit  string       `json:"memory_limit"`
	Name         string       `json:"name"`
	// NetworkPolicy is an allowlist's type and domains, never its secrets
	// (OpenAI's Container object has no domain_secrets); absent: disabled.
	NetworkPolicy *netpolicy.Echo `json:"network_policy,omitempty"`
}

func containerJSON(c store.Container, now time.Time) containerObject {
	status := "running"
	if c.Expired(now) {
		status = "expired"
	}
	return containerObject{
		ID: c.ID, Object: "container", CreatedAt: c.CreatedAt, Status: status,
		ExpiresAfter: expiresAfter{Anchor: "last_active_at", Minutes: c.ExpiresAfterMinutes},
		LastActiveAt: c.LastActiveAt, MemoryLimit: c.MemoryLimit, Name: c.Name,
		NetworkPolicy: netpolicy.EchoOf(c.Network),
	}
}

type containerFileObject struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	CreatedAt   int64  `json:"created_at"`
	Bytes       int64  `json:"bytes"`
	ContainerID string `json:"container_id"`
	Path        string `json:"path"`
	Source      string `json:"source"`
}

func containerFileJSON(f store.File) containerFileObject {
	src := f.Source
	if src == "" {
		src = "user"
	}
	return containerFileObject{ID: f.ID, Object: "container.file", CreatedAt: f.CreatedAt, Bytes: f.Bytes,
		ContainerID: f.ContainerID, Path: f.Path, Source: src}
}

type fileObject struct {
	ID            string  `json:"id"`
	Object        string  `json:"object"`
	Bytes         int64   `json:"bytes"`
	CreatedAt     int64   `json:"created_at"`
	ExpiresAt     *int64  `json:"expires_at"`
	Filename      string  `json:"filename"`
	Purpose       string  `json:"purpose"`
	Status        string  `json:"status"`
	StatusDetails *string `json:"status_details"`
}

func fileJSON(f store.File) fileObject {
	o := fileObject{ID: f.ID, Object: "file", Bytes: f.Bytes, CreatedAt: f.CreatedAt, Filename: f.Filename,
		Purpose: f.Purpose, Status: "processed"}
	if f.ExpiresAt != 0 {
		e := f.ExpiresAt
		o.ExpiresAt = &e
	}
	return o
}

type listObject[T any] struct {
	Object  string  `json:"object"`
	Data    []T     `json:"data"`
	FirstID *string `json:"first_id"`
	LastID  *string `json:"last_id"`
	HasMore bool    `json:"has_more"`
}

// newList builds a page; first_id and last_id are null on an empty page,
// as OpenAI sends them.
func newList[T any](data []T, id func(T) string, hasMore bool) listObject[T] {
	l := listObject[T]{Object: "list", Data: data, HasMore: hasMore}
	if l.Data == nil {
		l.Data = []T{}
	}
	if len(data) > 0 {
		first, last := id(data[0]), id(data[len(data)-1])
		l.FirstID, l.LastID = &first, &last
	}
	return l
}

type deletedObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Deleted bool   `json:"deleted"`
}
