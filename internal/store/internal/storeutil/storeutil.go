// Package storeutil holds what both store implementations must do alike —
// the defaults PutFile and PutContainer fill in and the validation they do
// before touching any state — so the two cannot drift apart.
package storeutil

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/store"
)

// DataDir is where container files live, for a file given without a Path.
const DataDir = "/mnt/data"

// CheckContainer validates c before PutContainer stores it and fills
// CreatedAt and LastActiveAt with now when they are zero.
func CheckContainer(c store.Container, now time.Time) (store.Container, error) {
	switch {
	case c.Owner == "":
		return c, errors.New("store: container without an owner")
	case !store.ValidID(c.ID):
		return c, fmt.Errorf("store: invalid container id %q", c.ID)
	case c.ExpiresAfterMinutes < 0:
		return c, fmt.Errorf("store: negative expires_after_minutes %d", c.ExpiresAfterMinutes)
	case c.CreatedAt < 0 || c.LastActiveAt < 0:
		// Listings order by created_at as fixed-width digits.
		return c, errors.New("store: a container time before 1970")
	}
	if c.CreatedAt == 0 {
		c.CreatedAt = now.Unix()
	}
	if c.LastActiveAt == 0 {
		c.LastActiveAt = now.Unix()
	}
	return c, nil
}

// PrepareFile validates f before PutFile stores it with data and fills the
// defaults: Bytes from data, an id (cfile_… or file-…) when f has none,
// CreatedAt now, a container file's Path (DataDir/Filename) or Filename
// (the Path's base), and a Files API file's ExpiresAt (now+FileLifetime)
// when zero. An invalid ContainerID is ErrNotFound: no such container can
// exist. The FileBytes bound is checked here because it needs no state.
func PrepareFile(f store.File, data []byte, l store.Limits, now time.Time) (store.File, error) {
	if f.Owner == "" {
		return f, errors.New("store: file without an owner")
	}
	if f.ContainerID != "" && !store.ValidID(f.ContainerID) {
		return f, fmt.Errorf("container %q: %w", f.ContainerID, store.ErrNotFound)
	}
	if f.ID == "" {
		if f.ContainerID != "" {
			f.ID = idgen.New("cfile_")
		} else {
			f.ID = idgen.New("file-")
		}
	}
	if !store.ValidID(f.ID) {
		return f, fmt.Errorf("store: invalid file id %q", f.ID)
	}
	if f.CreatedAt < 0 || f.ExpiresAt < 0 {
		return f, errors.New("store: a file time before 1970")
	}
	f.Bytes = int64(len(data))
	f.Revision = idgen.Random("", 16)
	if l.FileBytes > 0 && f.Bytes > l.FileBytes {
		return f, &store.QuotaError{Limit: store.LimitFileBytes, Max: l.FileBytes}
	}
	if f.CreatedAt == 0 {
		f.CreatedAt = now.Unix()
	}
	if f.ContainerID == "" {
		// Files API files have no path; they expire by their own clock.
		f.Path = ""
		if f.ExpiresAt == 0 && l.FileLifetime > 0 {
			f.ExpiresAt = now.Add(l.FileLifetime).Unix()
		}
		return f, nil
	}
	// Container files live and die with their container.
	f.ExpiresAt = 0
	switch {
	case f.Path == "" && f.Filename == "":
		return f, errors.New("store: container file without a path or filename")
	case f.Path == "":
		f.Path = path.Join(DataDir, path.Base(f.Filename))
	case f.Filename == "":
		f.Filename = path.Base(f.Path)
	}
	// The path names a file an interpreter holds: clean, below DataDir,
	// every component one a file system accepts.
	rest, ok := strings.CutPrefix(f.Path, DataDir+"/")
	if !ok || path.Clean(f.Path) != f.Path {
		return f, fmt.Errorf("store: container file path %q is not a clean path below %s", f.Path, DataDir)
	}
	for part := range strings.SplitSeq(rest, "/") {
		if len(part) > store.MaxNameBytes {
			return f, fmt.Errorf("store: container file path %q has a component longer than %d bytes", f.Path, store.MaxNameBytes)
		}
	}
	return f, nil
}

// Parents lists the places of p's parent directories below DataDir, the
// nearest last: /mnt/data/a/b/c.txt → /mnt/data/a, /mnt/data/a/b. A
// container file at one of them is a store.PathConflictError.
func Parents(p string) []string {
	var out []string
	for i := len(DataDir) + 1; i < len(p); i++ {
		if p[i] == '/' {
			out = append(out, p[:i])
		}
	}
	return out
}

// FileExpired reports whether a Files API file has expired at now.
func FileExpired(f store.File, now time.Time) bool {
	return f.ExpiresAt != 0 && now.Unix() >= f.ExpiresAt
}

// Forgotten reports whether an expired container is past the time the store
// remembers it (its ExpiresAt plus ExpiredMemory) at now.
func Forgotten(c store.Container, l store.Limits, now time.Time) bool {
	return !now.Before(c.ExpiresAt().Add(l.ExpiredMemory))
}

// Less orders listing items by (created_at, id), the order of both
// directions of OpenAI's listings.
func Less(aCreated int64, aID string, bCreated int64, bID string) bool {
	if aCreated != bCreated {
		return aCreated < bCreated
	}
	return aID < bID
}
