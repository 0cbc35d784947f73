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
		if _, err := s.Get(ctx, "o/c/1", maxGet); !errors.Is(err, blob.ErrNotFound) {
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
			got, err := s.Get(ctx, "o/c/1", maxGet)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("Get after Put of %d bytes: %d bytes, %v", len(data), len(got), err)
			}
		}
		if err := s.Delete(ctx, "o/c/1"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, "o/c/1", maxGet); !errors.Is(err, blob.ErrNotFound) {
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
			_, err := s.Get(ctx, k, maxGet)
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
			_, err := s.Get(ctx, k, maxGet)
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
			if _, err := s.Get(ctx, k, maxGet); err == nil || errors.Is(err, blob.ErrNotFound) {
				t.Errorf("Get(%q): %v, want a key error", k, err)
			}
			if _, _, err := s.GetVersion(ctx, k, maxGet); err == nil || errors.Is(err, blob.ErrNotFound) {
				t.Errorf("GetVersion(%q): %v, want a key error", k, err)
			}
			if _, err := s.PutIf(ctx, k, []byte("x"), ""); err == nil || errors.Is(err, blob.ErrPrecondition) {
				t.Errorf("PutIf(%q): %v, want a key error", k, err)
			}
		}
		for _, p := range []string{"", "/", "a", "../", "a/../"} {
			if err := s.DeletePrefix(ctx, p); err == nil {
				t.Errorf("DeletePrefix(%q) was accepted", p)
			}
		}
	})
	t.Run("bounded reads", func(t *testing.T) {
		s := newStore(t)
		data := bytes.Repeat([]byte("0123456789abcdef"), 4<<10) // 64 KiB
		if err := s.Put(ctx, "o/c/big", data); err != nil {
			t.Fatal(err)
		}
		n := int64(len(data))
		if got, err := s.Get(ctx, "o/c/big", n); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Get bounded at its size: %d bytes, %v", len(got), err)
		}
		if got, v, err := s.GetVersion(ctx, "o/c/big", n); err != nil || !bytes.Equal(got, data) || v == "" {
			t.Fatalf("GetVersion bounded at its size: %d bytes, version %q, %v", len(got), v, err)
		}
		for _, max := range []int64{n - 1, 1} {
			if got, err := s.Get(ctx, "o/c/big", max); !errors.Is(err, blob.ErrTooLarge) || got != nil {
				t.Errorf("Get of %d bytes bounded at %d: %d bytes, %v; want ErrTooLarge", n, max, len(got), err)
			}
			if got, _, err := s.GetVersion(ctx, "o/c/big", max); !errors.Is(err, blob.ErrTooLarge) || got != nil {
				t.Errorf("GetVersion of %d bytes bounded at %d: %d bytes, %v; want ErrTooLarge", n, max, len(got), err)
			}
		}
		if _, err := s.Get(ctx, "o/c/none", 1); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("bounded Get of a key never put: %v, want ErrNotFound", err)
		}
		if _, _, err := s.GetVersion(ctx, "o/c/none", 1); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("GetVersion of a key never put: %v, want ErrNotFound", err)
		}
	})
	t.Run("conditional writes", func(t *testing.T) {
		s := newStore(t)
		const k = "o/c/head"
		precondition := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, blob.ErrPrecondition) {
				t.Fatalf("%s: %v, want ErrPrecondition", what, err)
			}
		}
		holds := func(want string, wantVersion string) {
			t.Helper()
			got, v, err := s.GetVersion(ctx, k, maxGet)
			if err != nil || string(got) != want || (wantVersion != "" && v != wantVersion) {
				t.Fatalf("the key holds %q version %q (%v), want %q version %q", got, v, err, want, wantVersion)
			}
		}
		_, err := s.PutIf(ctx, k, []byte("x"), "no-such-version")
		precondition("PutIf of a key never put, on a version", err)
		v1, err := s.PutIf(ctx, k, []byte("one"), "")
		if err != nil || v1 == "" {
			t.Fatalf("create-only PutIf of a new key: %q, %v", v1, err)
		}
		holds("one", v1)
		_, err = s.PutIf(ctx, k, []byte("two"), "")
		precondition("create-only PutIf of a key that exists", err)
		_, err = s.PutIf(ctx, k, []byte("two"), "bogus")
		precondition("PutIf on a version the key never had", err)
		holds("one", v1)
		v2, err := s.PutIf(ctx, k, []byte("two"), v1)
		if err != nil || v2 == "" || v2 == v1 {
			t.Fatalf("PutIf on the current version: %q (was %q), %v", v2, v1, err)
		}
		holds("two", v2)
		_, err = s.PutIf(ctx, k, []byte("three"), v1)
		precondition("PutIf on a version replaced since", err)
		holds("two", v2)
		// An unconditional Put is another version too.
		if err := s.Put(ctx, k, []byte("put")); err != nil {
			t.Fatal(err)
		}
		_, v3, err := s.GetVersion(ctx, k, maxGet)
		if err != nil || v3 == v2 {
			t.Fatalf("after a Put: version %q (before %q), %v", v3, v2, err)
		}
		_, err = s.PutIf(ctx, k, []byte("three"), v2)
		precondition("PutIf on the version a Put replaced", err)
		v4, err := s.PutIf(ctx, k, []byte("four"), v3)
		if err != nil {
			t.Fatalf("PutIf on the Put's version: %v", err)
		}
		holds("four", v4)
		if err := s.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
		_, err = s.PutIf(ctx, k, []byte("five"), v4)
		precondition("PutIf on the version of a deleted blob", err)
		if _, err := s.Get(ctx, k, maxGet); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("a failed PutIf left a blob: %v", err)
		}
		if _, err := s.PutIf(ctx, k, []byte("five"), ""); err != nil {
			t.Fatalf("create-only PutIf after a Delete: %v", err)
		}
		holds("five", "")
	})
	t.Run("racing conditional writes: exactly one wins", func(t *testing.T) {
		s := newStore(t)
		const k = "o/c/raced"
		const writers = 6
		version := "" // the first round races to create the key
		for round := range 4 {
			var wg sync.WaitGroup
			start := make(chan struct{})
			versions := make([]string, writers)
			errs := make([]error, writers)
			for i := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					versions[i], errs[i] = s.PutIf(ctx, k, fmt.Appendf(nil, "round %d writer %d", round, i), version)
				}()
			}
			close(start)
			wg.Wait()
			winner := -1
			for i, err := range errs {
				switch {
				case err == nil && winner >= 0:
					t.Fatalf("round %d: writers %d and %d both won a PutIf on version %q", round, winner, i, version)
				case err == nil:
					winner = i
				case !errors.Is(err, blob.ErrPrecondition):
					t.Fatalf("round %d: writer %d: %v, want success or ErrPrecondition", round, i, err)
				}
			}
			if winner < 0 {
				t.Fatalf("round %d: no writer won on version %q", round, version)
			}
			got, v, err := s.GetVersion(ctx, k, maxGet)
			if want := fmt.Sprintf("round %d writer %d", round, winner); err != nil || string(got) != want || v != versions[winner] {
				t.Fatalf("round %d: the key holds %q version %q (%v), want the winner's %q version %q", round, got, v, err, want, versions[winner])
			}
			version = v
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
					if got, err := s.Get(ctx, "o/c/latest", maxGet); err != nil || !isOneOf(got, blobs) {
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

// maxGet bounds the suite's reads: above any blob it writes.
const maxGet = 64 << 20

func isOneOf(b []byte, set [][]byte) bool {
	for _, s := range set {
		if bytes.Equal(b, s) {
			return true
		}
	}
	return false
}
