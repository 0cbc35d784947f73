// Package blobtest is the conformance suite every blob.Store passes.
package blobtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/checkpoint/blob"
)

// Run runs the suite against the stores newStore returns, a new empty one
// for each subtest.
func Run(t *testing.T, newStore func(t *testing.T) blob.Store) {
	ctx := context.Background()
	t.Run("put get replace delete", func(t *testing.T) {
		s := newStore(t)
		if _, err := s.Get(ctx, "o/c/1"); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("Get of a key never put: %v, want ErrNotFound", err)
		}
		big := make([]byte, 3<<20+17) // several MiB, not a round size
		if _, err := rand.Read(big); err != nil {
			t.Fatal(err)
		}
		for _, data := range [][]byte{[]byte("first"), big, {}} {
			if err := s.Put(ctx, "o/c/1", data); err != nil {
				t.Fatalf("Put: %v", err)
			}
			got, err := s.Get(ctx, "o/c/1")
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("Get after Put of %d bytes: %d bytes, %v", len(data), len(got), err)
			}
		}
		if err := s.Delete(ctx, "o/c/1"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, "o/c/1"); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
		}
		if err := s.Delete(ctx, "o/c/1"); err != nil {
			t.Fatalf("Delete of a missing key: %v, want nil", err)
		}
	})
	t.Run("delete prefix", func(t *testing.T) {
		s := newStore(t)
		// Not both "o/c1" and "o/c1/a": S3 allows it, but a gateway on a
		// file system (versitygw's posix backend) does not, and callers
		// never need it.
		keys := []string{"o/c1/a", "o/c1/b", "o/c1/deep/x", "o/c10/a", "o/c1x"}
		for _, k := range keys {
			if err := s.Put(ctx, k, []byte(k)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.DeletePrefix(ctx, "o/c1/"); err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			_, err := s.Get(ctx, k)
			gone := errors.Is(err, blob.ErrNotFound)
			if want := strings.HasPrefix(k, "o/c1/"); gone != want {
				t.Errorf("%s after DeletePrefix(o/c1/): gone %v, want %v (%v)", k, gone, want, err)
			}
		}
		if err := s.DeletePrefix(ctx, "nothing/here/"); err != nil {
			t.Errorf("DeletePrefix of nothing: %v", err)
		}
	})
	t.Run("sweep", func(t *testing.T) {
		s := newStore(t)
		sw, ok := s.(blob.Sweeper)
		if !ok {
			t.Fatal("the store is not a blob.Sweeper: checkpoints in it would never expire")
		}
		before := time.Now().Add(-time.Hour)
		for _, k := range []string{"v1/o/c1/state", "v1/o/c2/state", "v1/bases/b1", "other/x"} {
			if err := s.Put(ctx, k, []byte(k)); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := sw.Sweep(ctx, "v1/", before, nil); err != nil || n != 0 {
			t.Fatalf("Sweep with a cutoff before every write: %d removed, %v", n, err)
		}
		skipBases := func(k string) bool { return strings.HasPrefix(k, "v1/bases/") }
		n, err := sw.Sweep(ctx, "v1/", time.Now().Add(time.Hour), skipBases)
		if err != nil || n != 2 {
			t.Fatalf("Sweep: %d removed, %v; want the 2 states", n, err)
		}
		for k, want := range map[string]bool{"v1/o/c1/state": false, "v1/o/c2/state": false, "v1/bases/b1": true, "other/x": true} {
			_, err := s.Get(ctx, k)
			if kept := err == nil; kept != want {
				t.Errorf("%s after the sweep: kept %v, want %v (%v)", k, kept, want, err)
			}
		}
	})
	t.Run("bad keys", func(t *testing.T) {
		s := newStore(t)
		for _, k := range []string{"", "/abs", "a/../b", "../up", "a//b", "a/./b", "a/", "sp ace", "a\\b", "nul\x00", "é"} {
			if err := s.Put(ctx, k, []byte("x")); err == nil {
				t.Errorf("Put(%q) was accepted", k)
			}
			if _, err := s.Get(ctx, k); err == nil || errors.Is(err, blob.ErrNotFound) {
				t.Errorf("Get(%q): %v, want a key error", k, err)
			}
		}
		for _, p := range []string{"", "/", "a", "../", "a/../"} {
			if err := s.DeletePrefix(ctx, p); err == nil {
				t.Errorf("DeletePrefix(%q) was accepted", p)
			}
		}
	})
	t.Run("concurrent puts leave one whole blob", func(t *testing.T) {
		s := newStore(t)
		blobs := make([][]byte, 6)
		for i := range blobs {
			blobs[i] = bytes.Repeat([]byte{byte('a' + i)}, 256<<10)
		}
		var wg sync.WaitGroup
		errs := make(chan error, len(blobs)*4)
		for round := range 4 {
			for i := range blobs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := s.Put(ctx, "o/c/latest", blobs[i]); err != nil {
						errs <- fmt.Errorf("round %d: %w", round, err)
					}
					if got, err := s.Get(ctx, "o/c/latest"); err != nil || !isOneOf(got, blobs) {
						errs <- fmt.Errorf("a read during puts: %d bytes, %v: not one whole blob", len(got), err)
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

func isOneOf(b []byte, set [][]byte) bool {
	for _, s := range set {
		if bytes.Equal(b, s) {
			return true
		}
	}
	return false
}
