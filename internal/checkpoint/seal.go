package checkpoint

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// KeySize is the size of a checkpoint key: AES-256.
const KeySize = 32

// Binding is what a checkpoint is for. Open refuses a checkpoint sealed
// for any other binding.
type Binding struct {
	Owner     string // the credential's owner that holds the container
	Container string // the container's id
	// Origin names what the state was made from and can only be restored
	// into: the provider, the runtime (wasm: the runtime and snapshot
	// keys; gVisor: the root filesystem and the runsc version). Another
	// origin is another runtime: refused, never guessed at.
	Origin string
}

// ErrRefused is returned by Open for a checkpoint that must not be used
// and never can be: not a checkpoint, truncated, tampered with, or sealed
// for another owner or container. Callers branch on it (errors.Is): a
// refused checkpoint is no checkpoint, and may be dropped.
var ErrRefused = errors.New("checkpoint refused")

// ErrForeign is returned by Open for a checkpoint this server cannot use
// but another may: sealed under another key (a key rotation, another
// deployment), in a format version this build does not read, or for
// another origin (another runtime or build: a rolling update runs both).
// It does not match ErrRefused: a foreign checkpoint is not used, and not
// dropped either.
var ErrForeign = errors.New("checkpoint foreign")

// refusal says why a checkpoint was refused.
type refusal struct{ why string }

func (r *refusal) Error() string { return "checkpoint refused: " + r.why }
func (r *refusal) Is(target error) bool {
	return target == ErrRefused
}

func refuse(format string, args ...any) error { return &refusal{why: fmt.Sprintf(format, args...)} }

// foreignness says whose a checkpoint seems to be.
type foreignness struct{ why string }

func (f *foreignness) Error() string { return "checkpoint of another key, build or origin: " + f.why }
func (f *foreignness) Is(target error) bool {
	return target == ErrForeign
}

func foreign(format string, args ...any) error {
	return &foreignness{why: fmt.Sprintf(format, args...)}
}

// Sealer seals and opens checkpoints under one key.
type Sealer struct {
	aead  cipher.AEAD
	keyID [8]byte // names the key in each blob: a key rotation is refused by name, not as tampering
}

// The sealed format (version 2): magic (4 bytes), version (1), key id
// (8), origin id (8: a hash of Binding.Origin), nonce (12), then the
// AES-GCM ciphertext of the state with its 16-byte tag. The additional
// data is the header and the binding, so neither can be changed without
// the tag failing. The key id and the origin id say, before any
// decryption, that a checkpoint is another key's or another origin's
// (ErrForeign) rather than tampered with (ErrRefused).
//
// Version 1, still opened, had no origin id: magic, version, key id,
// nonce.
var magic = [4]byte{'c', 'i', 'c', 'p'}

const (
	version     = 2
	headerSize  = 4 + 1 + 8 + 8 + 12
	version1    = 1
	headerSize1 = 4 + 1 + 8 + 12
	tagSize     = 16
)

// Overhead is what sealing adds to a state's size.
const Overhead = headerSize + tagSize

// originID names an origin in a sealed header without saying what it is.
func originID(origin string) [8]byte {
	h := sha256.Sum256([]byte("codeinterp checkpoint origin\x00" + origin))
	return [8]byte(h[:8])
}

// NewSealer returns a Sealer for a KeySize-byte key.
func NewSealer(key []byte) (*Sealer, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("checkpoint: the key is %d bytes, want %d (AES-256)", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	s := &Sealer{aead: aead}
	// The key's id is a hash of it under a fixed label: it says which key
	// sealed a blob without saying anything of the key.
	h := sha256.Sum256(append([]byte("codeinterp checkpoint key id\x00"), key...))
	copy(s.keyID[:], h[:])
	return s, nil
}

// Seal encrypts state for b. A random nonce per checkpoint: 2^32 seals
// under one key stay far inside GCM's bound for random nonces.
func (s *Sealer) Seal(b Binding, state []byte) ([]byte, error) {
	out := make([]byte, headerSize, headerSize+len(state)+s.aead.Overhead())
	copy(out, magic[:])
	out[4] = version
	copy(out[5:13], s.keyID[:])
	oid := originID(b.Origin)
	copy(out[13:21], oid[:])
	if _, err := rand.Read(out[21:headerSize]); err != nil {
		return nil, fmt.Errorf("checkpoint: nonce: %w", err)
	}
	return s.aead.Seal(out, out[21:headerSize], state, additional(out[:headerSize], b)), nil
}

// Open checks and decrypts a checkpoint sealed for b. An error wraps
// ErrRefused (never usable) or ErrForeign (another key's, format's or
// origin's); nothing of a refused or foreign blob is returned.
func (s *Sealer) Open(b Binding, sealed []byte) ([]byte, error) {
	state, _, err := s.open(b, sealed)
	return state, err
}

// open is Open that also says the blob's format version.
func (s *Sealer) open(b Binding, sealed []byte) ([]byte, byte, error) {
	if len(sealed) < 5 {
		return nil, 0, refuse("%d bytes is shorter than any sealed checkpoint (truncated?)", len(sealed))
	}
	if [4]byte(sealed[:4]) != magic {
		return nil, 0, refuse("not a sealed checkpoint")
	}
	v := sealed[4]
	var size int
	switch v {
	case version:
		size = headerSize
	case version1:
		size = headerSize1
	default:
		return nil, 0, foreign("format version %d, this server reads %d and %d", v, version1, version)
	}
	if len(sealed) < size+s.aead.Overhead() {
		return nil, 0, refuse("%d bytes is shorter than any sealed checkpoint (truncated?)", len(sealed))
	}
	if [8]byte(sealed[5:13]) != s.keyID {
		return nil, 0, foreign("sealed under another key (key id %x, this server's %x)", sealed[5:13], s.keyID)
	}
	if v == version {
		if oid := originID(b.Origin); [8]byte(sealed[13:21]) != oid {
			return nil, 0, foreign("sealed for another origin, a runtime or build that is not this server's (origin id %x, this server's %x)", sealed[13:21], oid[:])
		}
	}
	state, err := s.aead.Open(nil, sealed[size-12:size], sealed[size:], additional(sealed[:size], b))
	if err != nil {
		if v == version1 {
			// Version 1 does not say its origin: another runtime's or
			// build's fails the tag as a tampered one does. Kept, not
			// used: it may be another build's, still running.
			return nil, 0, foreign("format version 1 that fails authentication: another origin's (a build before format %d), or tampered", version)
		}
		// GCM cannot tell a changed byte from another owner or
		// container: both fail the tag.
		return nil, 0, refuse("it fails authentication: tampered, truncated, or sealed for another owner or container")
	}
	return state, v, nil
}

// additional is the AEAD's additional data: the header, then each field
// of the binding with its length, so that no two bindings encode alike.
func additional(header []byte, b Binding) []byte {
	ad := append([]byte(nil), header...)
	for _, f := range []string{b.Owner, b.Container, b.Origin} {
		ad = binary.BigEndian.AppendUint32(ad, uint32(len(f)))
		ad = append(ad, f...)
	}
	return ad
}
