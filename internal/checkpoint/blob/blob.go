package blob

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Store keeps blobs by key.
type Store interface {
	// Put stores data under key, replacing any blob there, atomically.
	Put(ctx context.Context, key string, data []byte) error
	// Get returns key's blob, or an error wrapping ErrNotFound.
	Get(ctx context.Context, key string) ([]byte, error)
	// Delete removes key's blob; a key with none is not an error.
	Delete(ctx context.Context, key string) error
	// DeletePrefix removes every blob whose key starts with prefix (a
	// container's checkpoints when it expires or is deleted). prefix must
	// be a valid key ending in "/".
	DeletePrefix(ctx context.Context, prefix string) error
}

// Sweeper is implemented by stores that can remove old blobs themselves
// (dir, s3): what a server's periodic sweep uses to expire checkpoints.
// Object storage can do it with a lifecycle rule instead.
type Sweeper interface {
	// Sweep removes the blobs under prefix last written before cutoff,
	// except those skip names, and reports how many it removed.
	Sweep(ctx context.Context, prefix string, cutoff time.Time, skip func(key string) bool) (int, error)
}

// ErrNotFound is returned by Get for a key with no blob.
var ErrNotFound = errors.New("blob: not found")

// MaxKeyBytes bounds a key.
const MaxKeyBytes = 512

// CheckKey reports whether key is one a Store accepts: segments of ASCII
// letters, digits, '.', '_' and '-', separated by single '/', none of them
// "." or "..", no leading '/'. Keys map onto file paths and object names
// alike, so nothing in one may climb out of the store's root.
func CheckKey(key string) error {
	return checkKey(key)
}

// CheckPrefix is CheckKey for DeletePrefix's prefix: a key plus a
// trailing '/'.
func CheckPrefix(prefix string) error {
	k, ok := strings.CutSuffix(prefix, "/")
	if !ok {
		return fmt.Errorf("blob: prefix %q does not end in /", prefix)
	}
	return checkKey(k)
}

func checkKey(key string) error {
	if key == "" || len(key) > MaxKeyBytes {
		return fmt.Errorf("blob: key of %d bytes (1–%d)", len(key), MaxKeyBytes)
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("blob: key %q has an empty, . or .. segment", key)
		}
		for _, c := range seg {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
				return fmt.Errorf("blob: key %q has %q (letters, digits, . _ - and / only)", key, c)
			}
		}
	}
	return nil
}
