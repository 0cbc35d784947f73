package checkpoint

import (
	"bytes"
	"crypto/rand"
	"errors"
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
// refused with ErrRefused and nothing of it is returned.
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
	for _, tc := range []struct {
		name    string
		sealer  *Sealer
		binding Binding
		blob    []byte
		why     string
	}{
		{"another owner", s, Binding{Owner: "owner-b", Container: "cntr_1", Origin: b.Origin}, sealed, "fails authentication"},
		{"another container", s, Binding{Owner: "owner-a", Container: "cntr_2", Origin: b.Origin}, sealed, "fails authentication"},
		{"another runtime", s, Binding{Owner: "owner-a", Container: "cntr_1", Origin: "wasm/rt2/snap"}, sealed, "fails authentication"},
		// Length-prefixed fields: moving a byte between fields is another binding.
		{"fields shifted", s, Binding{Owner: "owner-ac", Container: "ntr_1", Origin: b.Origin}, sealed, "fails authentication"},
		{"a flipped byte in the state", s, b, flip(len(sealed) - 20), "fails authentication"},
		{"a flipped byte in the tag", s, b, flip(len(sealed) - 1), "fails authentication"},
		{"a flipped byte in the nonce", s, b, flip(headerSize - 1), "fails authentication"},
		{"truncated", s, b, sealed[:len(sealed)-1], "fails authentication"},
		{"truncated to its header", s, b, sealed[:headerSize], "shorter than any"},
		{"empty", s, b, nil, "shorter than any"},
		{"another format version", s, b, flip(4), "format version"},
		{"not a checkpoint", s, b, append([]byte("PK\x03\x04"), sealed[4:]...), "not a sealed checkpoint"},
		{"sealed under another key", other, b, sealed, "another key"},
		{"the key id forged to match", other, b, func() []byte {
			c := bytes.Clone(sealed)
			copy(c[5:13], other.keyID[:])
			return c
		}(), "fails authentication"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.sealer.Open(tc.binding, tc.blob)
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("Open: %v, want ErrRefused saying %q", err, tc.why)
			}
			if got != nil {
				t.Fatalf("a refused checkpoint returned %d bytes", len(got))
			}
		})
	}
}

func TestNewSealerKeySize(t *testing.T) {
	for _, n := range []int{0, 16, 24, 31, 33} {
		if _, err := NewSealer(make([]byte, n)); err == nil {
			t.Errorf("a %d-byte key was accepted", n)
		}
	}
}
