package checkpoint

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func newKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpen(t *testing.T) {
	s, err := NewSealer(newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	b := Binding{Owner: "owner-a", Container: "cntr_1", Origin: "wasm/runtime-1/snapshot-1"}
	state := bytes.Repeat([]byte("x = 41\n"), 1000)
	sealed, err := s.Seal(b, state)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("x = 41")) {
		t.Fatal("the sealed checkpoint holds the state in the clear")
	}
	got, err := s.Open(b, sealed)
	if err != nil || !bytes.Equal(got, state) {
		t.Fatalf("Open: %v (%d bytes, want %d)", err, len(got), len(state))
	}
	again, _ := s.Seal(b, state)
	if bytes.Equal(again, sealed) {
		t.Fatal("two seals of the same state are the same bytes: the nonce is not fresh")
	}
}

// TestOpenRefuses is the hostile corpus of checkpoints: every one is
// refused with ErrRefused (never usable: dropped) or ErrForeign (another
// key's, format's or origin's: kept), never both, and nothing of it is
// returned.
func TestOpenRefuses(t *testing.T) {
	key := newKey(t)
	s, _ := NewSealer(key)
	b := Binding{Owner: "owner-a", Container: "cntr_1", Origin: "wasm/rt/snap"}
	sealed, err := s.Seal(b, []byte("secret state of owner a"))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewSealer(newKey(t))
	flip := func(i int) []byte {
		c := bytes.Clone(sealed)
		c[i] ^= 0x01
		return c
	}
	otherOrigin := Binding{Owner: "owner-a", Container: "cntr_1", Origin: "wasm/rt2/snap"}
	for _, tc := range []struct {
		name    string
		sealer  *Sealer
		binding Binding
		blob    []byte
		want    error
		why     string
	}{
		{"another owner", s, Binding{Owner: "owner-b", Container: "cntr_1", Origin: b.Origin}, sealed, ErrRefused, "fails authentication"},
		{"another container", s, Binding{Owner: "owner-a", Container: "cntr_2", Origin: b.Origin}, sealed, ErrRefused, "fails authentication"},
		// Length-prefixed fields: moving a byte between fields is another binding.
		{"fields shifted", s, Binding{Owner: "owner-ac", Container: "ntr_1", Origin: b.Origin}, sealed, ErrRefused, "fails authentication"},
		{"a flipped byte in the state", s, b, flip(len(sealed) - 20), ErrRefused, "fails authentication"},
		{"a flipped byte in the tag", s, b, flip(len(sealed) - 1), ErrRefused, "fails authentication"},
		{"a flipped byte in the nonce", s, b, flip(headerSize - 1), ErrRefused, "fails authentication"},
		{"truncated", s, b, sealed[:len(sealed)-1], ErrRefused, "fails authentication"},
		{"truncated to its header", s, b, sealed[:headerSize], ErrRefused, "shorter than any"},
		{"truncated to its magic", s, b, sealed[:3], ErrRefused, "shorter than any"},
		{"empty", s, b, nil, ErrRefused, "shorter than any"},
		{"not a checkpoint", s, b, append([]byte("PK\x03\x04"), sealed[4:]...), ErrRefused, "not a sealed checkpoint"},
		{"the key id forged to match", other, b, func() []byte {
			c := bytes.Clone(sealed)
			copy(c[5:13], other.keyID[:])
			return c
		}(), ErrRefused, "fails authentication"},
		{"the origin id forged to match", s, otherOrigin, func() []byte {
			c := bytes.Clone(sealed)
			oid := originID(otherOrigin.Origin)
			copy(c[13:21], oid[:])
			return c
		}(), ErrRefused, "fails authentication"},

		{"another runtime", s, otherOrigin, sealed, ErrForeign, "another origin"},
		{"a flipped byte in the origin id", s, b, flip(14), ErrForeign, "another origin"},
		{"another format version", s, b, flip(4), ErrForeign, "format version 3"},
		{"sealed under another key", other, b, sealed, ErrForeign, "another key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.sealer.Open(tc.binding, tc.blob)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("Open: %v, want %v saying %q", err, tc.want, tc.why)
			}
			if errors.Is(err, ErrRefused) && errors.Is(err, ErrForeign) {
				t.Fatalf("Open: %v is both refused and foreign", err)
			}
			if got != nil {
				t.Fatalf("a refused checkpoint returned %d bytes", len(got))
			}
		})
	}
}

// TestOpenFormat1: a checkpoint sealed before format 2 (no origin id in
// its header; testdata/format1, written by that build) still opens; one
// that fails its tag may be another origin's, which format 1 cannot say,
// so it is foreign (kept, never used), not refused.
func TestOpenFormat1(t *testing.T) {
	s, err := NewSealer(bytes.Repeat([]byte{0x42}, KeySize))
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "format1", "v1", "*", "cntr_idle", "state~"))
	if len(files) != 1 {
		t.Fatalf("testdata: %v", files)
	}
	sealed, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	b := Binding{Owner: "alice", Container: "cntr_idle", Origin: "wasm/format-1"}
	plain, format, err := s.open(b, sealed)
	if err != nil || format != 1 || string(plain) != "3cdbc100736a4c2577423077d39d7a1aformat 1 state, idle" {
		t.Fatalf("open of a format 1 checkpoint: %q, format %d, %v", plain, format, err)
	}
	for name, ob := range map[string]Binding{
		"another origin": {Owner: "alice", Container: "cntr_idle", Origin: "wasm/format-2"},
		"another owner":  {Owner: "bob", Container: "cntr_idle", Origin: "wasm/format-1"},
	} {
		if _, err := s.Open(ob, sealed); !errors.Is(err, ErrForeign) || errors.Is(err, ErrRefused) {
			t.Errorf("format 1, %s: %v, want ErrForeign only", name, err)
		}
	}
	other, _ := NewSealer(newKey(t))
	if _, err := other.Open(b, sealed); !errors.Is(err, ErrForeign) || !strings.Contains(err.Error(), "another key") {
		t.Errorf("format 1 under another key: %v, want ErrForeign", err)
	}
}

func TestNewSealerKeySize(t *testing.T) {
	for _, n := range []int{0, 16, 24, 31, 33} {
		if _, err := NewSealer(make([]byte, n)); err == nil {
			t.Errorf("a %d-byte key was accepted", n)
		}
	}
}
