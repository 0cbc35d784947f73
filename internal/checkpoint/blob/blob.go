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
	// Get returns key's blob, an error wrapping ErrNotFound, or one
	// wrapping ErrTooLarge for a blob of more than max bytes, of which it
	// reads no more than max+1 (what a checkpoint reads is bounded, so a
	// blob that grew in the store is an error, not an allocation of its
	// size). max must be positive.
	Get(ctx context.Context, key string, max int64) ([]byte, error)
	// Delete removes key's blob; a key with none is not an error.
	Delete(ctx context.Context, key string) error
	// DeletePrefix removes every blob whose key starts with prefix (a
	// container's checkpoints when it expires or is deleted). prefix must
	// be a valid key ending in "/".
	DeletePrefix(ctx context.Context, prefix string) error
	Conditional
}

// Conditional is compare-and-set on a key: what makes two writers of one
// key unable to interleave (the checkpoint head, which fences writers).
// Versions are opaque strings a store makes (an ETag, a hash of the
// content), equal for a key as long as its blob is not replaced.
type Conditional interface {
	// GetVersion is Get with the version of the blob it returns.
	GetVersion(ctx context.Context, key string, max int64) (data []byte, version string, err error)
	// PutIf stores data under key only if key's blob is still the
	// version ifMatch, or, with ifMatch "", only if key has no blob
	// (create-only). It returns the new blob's version, or an error
	// wrapping ErrPrecondition when the condition does not hold: the key
	// holds another version, or none, or (S3's 409) another write of it
	// was under way; read it again and decide again. Any other error
	// leaves the outcome unknown: the write may have happened.
	//
	// PutIf is atomic against other PutIfs of the key. A Put or Delete
	// racing with a PutIf of the same key may be ordered either way:
	// write a key with one or the other, not both.
	PutIf(ctx context.Context, key string, data []byte, ifMatch string) (version string, err error)
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

// ErrTooLarge is returned by Get and GetVersion for a blob above their
// bound.
var ErrTooLarge = errors.New("blob: larger than its bound")

// ErrPrecondition is returned by PutIf when the key does not hold the
// version the write was conditional on.
var ErrPrecondition = errors.New("blob: precondition failed")

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
