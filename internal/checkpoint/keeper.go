package checkpoint

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/codeinterp/codeinterp/internal/checkpoint/blob"
)

// Keeper keeps the latest sealed checkpoint of each container in a blob
// store, under a key made of a hash of the owner and the container id.
type Keeper struct {
	sealer   *Sealer
	store    blob.Store
	origin   string
	maxBytes int
	metrics  *metrics // nil until Instrument
}

// ErrNone is returned by Load when a container has no checkpoint.
var ErrNone = errors.New("checkpoint: none")

// ErrTooLarge is returned by Save for a state above the Keeper's bound:
// no checkpoint is kept (the previous one is removed, being older than
// the state the container now has).
var ErrTooLarge = errors.New("checkpoint: state too large")

// NewKeeper returns a Keeper that seals with s for origin (Binding.Origin)
// and keeps states of at most maxBytes (0: no bound) in st.
func NewKeeper(s *Sealer, st blob.Store, origin string, maxBytes int) *Keeper {
	return &Keeper{sealer: s, store: st, origin: origin, maxBytes: maxBytes}
}

// Origin is what the Keeper binds checkpoints to.
func (k *Keeper) Origin() string { return k.origin }

// prefix is the container's folder in the store. The owner is hashed: an
// owner is whatever the credential store calls it, not a key segment.
func prefix(owner, container string) string {
	h := sha256.Sum256([]byte("codeinterp checkpoint owner\x00" + owner))
	return "v1/" + hex.EncodeToString(h[:16]) + "/" + container + "/"
}

func (k *Keeper) key(owner, container string) (string, error) {
	key := prefix(owner, container) + "state"
	if err := blob.CheckKey(key); err != nil {
		return "", fmt.Errorf("checkpoint: container id %q: %w", container, err)
	}
	return key, nil
}

// Save seals state for the container and makes it its checkpoint. It
// returns the checkpoint's token, which names this write: Load returns it
// with the state, and Head returns the token of the latest write, so a
// holder can tell that another server saved the container since.
func (k *Keeper) Save(ctx context.Context, owner, container string, state []byte) (token string, err error) {
	start := time.Now()
	defer func() { k.metrics.saved(len(state), err, time.Since(start)) }()
	key, err := k.key(owner, container)
	if err != nil {
		return "", err
	}
	if k.maxBytes > 0 && len(state) > k.maxBytes {
		_ = k.store.DeletePrefix(ctx, prefix(owner, container))
		return "", fmt.Errorf("%w: %d bytes, checkpoints.max_bytes is %d", ErrTooLarge, len(state), k.maxBytes)
	}
	var tok [tokenSize / 2]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return "", err
	}
	token = hex.EncodeToString(tok[:])
	plain := append([]byte(token), state...)
	sealed, err := k.sealer.Seal(Binding{Owner: owner, Container: container, Origin: k.origin}, plain)
	if err != nil {
		return "", err
	}
	if err := k.store.Put(ctx, key, sealed); err != nil {
		return "", err
	}
	// The head after the state: a reader that sees the new head finds the
	// new state (a reader between the two sees the new state with the old
	// head, and Load's token is the state's own).
	if err := k.store.Put(ctx, prefix(owner, container)+"head", []byte(token)); err != nil {
		return "", err
	}
	return token, nil
}

// tokenSize is a checkpoint token's length in hex digits.
const tokenSize = 32

// Load returns the container's checkpoint, opened, and its token:
// ErrNone when it has none, an error wrapping ErrRefused when the one
// kept is not usable (another origin, tampered, another key), and a blob
// store's error as is.
func (k *Keeper) Load(ctx context.Context, owner, container string) (state []byte, token string, err error) {
	start := time.Now()
	defer func() { k.metrics.loaded(err, time.Since(start)) }()
	key, err := k.key(owner, container)
	if err != nil {
		return nil, "", err
	}
	sealed, err := k.store.Get(ctx, key, 5<<30)
	if errors.Is(err, blob.ErrNotFound) {
		return nil, "", ErrNone
	}
	if err != nil {
		return nil, "", err
	}
	plain, err := k.sealer.Open(Binding{Owner: owner, Container: container, Origin: k.origin}, sealed)
	if err != nil {
		return nil, "", err
	}
	if len(plain) < tokenSize {
		return nil, "", refuse("no token")
	}
	return plain[tokenSize:], string(plain[:tokenSize]), nil
}

// Head returns the token of the container's latest checkpoint, or
// ErrNone, and whether code has run on that state since it was taken
// (MarkRunning): then the checkpoint is older than the container's
// interpreter was. It is one small read: a holder asks it before each run.
func (k *Keeper) Head(ctx context.Context, owner, container string) (token string, running bool, err error) {
	if _, err := k.key(owner, container); err != nil {
		return "", false, err
	}
	b, err := k.store.Get(ctx, prefix(owner, container)+"head", 1<<10)
	if errors.Is(err, blob.ErrNotFound) {
		return "", false, ErrNone
	}
	if err != nil {
		return "", false, err
	}
	token, running = strings.CutSuffix(string(b), headRunning)
	return token, running, nil
}

const headRunning = " running"

// MarkRunning records, before the first run on the state of checkpoint
// token, that code runs on it: a server that restores the checkpoint
// after this one died then knows the state it restores is older than the
// interpreter's was, and says so.
func (k *Keeper) MarkRunning(ctx context.Context, owner, container, token string) error {
	if _, err := k.key(owner, container); err != nil {
		return err
	}
	return k.store.Put(ctx, prefix(owner, container)+"head", []byte(token+headRunning))
}

// Drop removes everything kept for the container (it expired or was
// deleted).
func (k *Keeper) Drop(ctx context.Context, owner, container string) error {
	if _, err := k.key(owner, container); err != nil {
		return err
	}
	return k.store.DeletePrefix(ctx, prefix(owner, container))
}

// Bases: a session checkpoint (wasm) is a delta against the snapshot its
// interpreter was restored from, so the snapshot is kept here too, once,
// for whoever restores the checkpoint: this server after a restart or a
// rotation (which replace the snapshot on disk), or another replica (which
// took its own). Sealed like a checkpoint, bound to the snapshot's id: a
// base feeds every session restored over it, so a forged one must never
// load.

func baseKey(id string) string {
	h := sha256.Sum256([]byte("codeinterp snapshot\x00" + id))
	return "v1/bases/" + hex.EncodeToString(h[:16])
}

func baseBinding(origin, id string) Binding {
	return Binding{Container: "snapshot", Origin: origin + "\x00" + id}
}

// PutBase keeps a snapshot's metadata and memory image under its id.
func (k *Keeper) PutBase(ctx context.Context, id string, meta, image []byte) error {
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return err
	}
	_ = binary.Write(zw, binary.BigEndian, uint32(len(meta)))
	_, _ = zw.Write(meta)
	_, _ = zw.Write(image)
	if err := zw.Close(); err != nil {
		return err
	}
	sealed, err := k.sealer.Seal(baseBinding(k.origin, id), buf.Bytes())
	if err != nil {
		return err
	}
	return k.store.Put(ctx, baseKey(id), sealed)
}

// maxBaseBytes bounds a base's decompressed size: a wasm memory (4 GiB)
// and its metadata.
const maxBaseBytes = 4<<30 + 1<<20

// GetBase returns the snapshot kept under id: ErrNone when there is none,
// an error wrapping ErrRefused when it fails its check.
func (k *Keeper) GetBase(ctx context.Context, id string) (meta, image []byte, err error) {
	sealed, err := k.store.Get(ctx, baseKey(id), maxBaseBytes+maxBaseBytes/1024+1<<20)
	if errors.Is(err, blob.ErrNotFound) {
		return nil, nil, ErrNone
	}
	if err != nil {
		return nil, nil, err
	}
	plain, err := k.sealer.Open(baseBinding(k.origin, id), sealed)
	if err != nil {
		return nil, nil, err
	}
	zr, err := zstd.NewReader(bytes.NewReader(plain), zstd.WithDecoderMaxMemory(maxBaseBytes), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, nil, err
	}
	defer zr.Close()
	all, err := io.ReadAll(zr)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: base %s: %w", id, err)
	}
	if len(all) < 4 {
		return nil, nil, fmt.Errorf("checkpoint: base %s is empty", id)
	}
	n := binary.BigEndian.Uint32(all)
	if uint64(n) > uint64(len(all)-4) {
		return nil, nil, fmt.Errorf("checkpoint: base %s: metadata of %d bytes in %d", id, n, len(all))
	}
	return all[4 : 4+n], all[4+n:], nil
}

// Sweep expires what the Keeper keeps: container checkpoints not written
// for ttl, and bases not written for twice that (a base is written again
// while checkpoints are taken over it, so it outlives the checkpoints that
// need it). A store that cannot sweep (no Sweeper) relies on its own
// expiry, e.g. an S3 lifecycle rule.
func (k *Keeper) Sweep(ctx context.Context, ttl time.Duration) (int, error) {
	sw, ok := k.store.(blob.Sweeper)
	if !ok {
		return 0, nil
	}
	now := time.Now()
	n, err := sw.Sweep(ctx, "v1/bases/", now.Add(-2*ttl), nil)
	m, err2 := sw.Sweep(ctx, "v1/", now.Add(-ttl), func(key string) bool { return strings.HasPrefix(key, "v1/bases/") })
	k.metrics.swept(n + m)
	return n + m, errors.Join(err, err2)
}
