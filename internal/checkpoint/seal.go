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

// ErrRefused is returned by Open for a checkpoint that must not be used.
// Callers branch on it (errors.Is): a refused checkpoint is no checkpoint.
var ErrRefused = errors.New("checkpoint refused")

// refusal says why a checkpoint was refused.
type refusal struct{ why string }

func (r *refusal) Error() string { return "checkpoint refused: " + r.why }
func (r *refusal) Is(target error) bool {
	return target == ErrRefused
}

func refuse(format string, args ...any) error { return &refusal{why: fmt.Sprintf(format, args...)} }

// Sealer seals and opens checkpoints under one key.
type Sealer struct {
	aead  cipher.AEAD
	keyID [8]byte // names the key in each blob: a key rotation is refused by name, not as tampering
}

// The sealed format: magic (4 bytes), version (1), key id (8), nonce (12),
// then the AES-GCM ciphertext of the state with its 16-byte tag. The
// additional data is the header and the binding, so neither can be
// changed without the tag failing.
var magic = [4]byte{'c', 'i', 'c', 'p'}

const (
	version    = 1
	headerSize = 4 + 1 + 8 + 12
)

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
	if _, err := rand.Read(out[13:headerSize]); err != nil {
		return nil, fmt.Errorf("checkpoint: nonce: %w", err)
	}
	return s.aead.Seal(out, out[13:headerSize], state, additional(out[:headerSize], b)), nil
}

// Open checks and decrypts a checkpoint sealed for b. Any error wraps
// ErrRefused; nothing of a refused blob is returned.
func (s *Sealer) Open(b Binding, sealed []byte) ([]byte, error) {
	if len(sealed) < headerSize+s.aead.Overhead() {
		return nil, refuse("%d bytes is shorter than any sealed checkpoint (truncated?)", len(sealed))
	}
	if [4]byte(sealed[:4]) != magic {
		return nil, refuse("not a sealed checkpoint")
	}
	if sealed[4] != version {
		return nil, refuse("format version %d, this server reads %d", sealed[4], version)
	}
	if [8]byte(sealed[5:13]) != s.keyID {
		return nil, refuse("sealed under another key (key id %x, this server's %x)", sealed[5:13], s.keyID)
	}
	state, err := s.aead.Open(nil, sealed[13:headerSize], sealed[headerSize:], additional(sealed[:headerSize], b))
	if err != nil {
		// GCM cannot tell a changed byte from another binding: both fail
		// the tag.
		return nil, refuse("it fails authentication: tampered, truncated, or sealed for another owner, container or runtime")
	}
	return state, nil
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
