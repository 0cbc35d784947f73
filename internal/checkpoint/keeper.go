package checkpoint

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/codeinterp/codeinterp/internal/checkpoint/blob"
)

// Keeper keeps the latest sealed checkpoint of each container in a blob
// store, in a folder named by a hash of the owner and the container id.
//
// The folder holds a head and the state it names:
//
//	head                    {"format":2,"token":"…","fence":7,"state":"state-0000000000000007-…","running":true}
//	state-<fence>-<random>  the sealed checkpoint: its token, its fence, the state
//
// The head is written only by compare-and-set (blob.Conditional), so two
// writers cannot interleave, and each write puts its state under a name
// of its own first, so a writer that loses never overwrites the state
// the head names. The fence is the writer's cluster lease token: a write
// under a fence below the head's is refused (ErrFenced).
//
// Folders written before format 2 have a head "<token>" or
// "<token> running" and the state at "state" (sealed in format 1, with
// no fence): they still load, and the next write replaces them.
type Keeper struct {
	sealer   *Sealer
	store    blob.Store
	origin   string
	maxBytes int
	metrics  *metrics // nil until Instrument
}

// ErrNone is returned by Load when a container has no checkpoint.
var ErrNone = errors.New("checkpoint: none")

// ErrNotLatest is returned by MarkRunning for a checkpoint that is no
// longer the container's latest: the interpreter restored from it (or that
// saved it) is older than the container's state, and must not run.
var ErrNotLatest = errors.New("checkpoint: not the latest")

// ErrTooLarge is returned by Save for a state above the Keeper's bound
// (the checkpoint kept, if any, is left as it was: the caller decides
// what becomes of it), and by Load for a blob above what this Keeper
// reads.
var ErrTooLarge = errors.New("checkpoint: state too large")

// ErrFenced is returned by Save and MarkRunning for a write under a fence
// lower than the one the container's latest checkpoint was written or
// marked under: another server took the container since (a higher lease
// token), and this one's write would overwrite newer state. Nothing is
// written.
var ErrFenced = errors.New("checkpoint: fenced")

// NewKeeper returns a Keeper that seals with s for origin (Binding.Origin)
// and keeps states of at most maxBytes (0: no bound but the one reads
// have, 5 GiB) in st.
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

// folder is the container's folder, checked: every key the Keeper makes
// in it is a valid key.
func (k *Keeper) folder(owner, container string) (string, error) {
	p := prefix(owner, container)
	if err := blob.CheckKey(p + stateName(^uint64(0), strings.Repeat("f", 16))); err != nil {
		return "", fmt.Errorf("checkpoint: container id %q: %w", container, err)
	}
	return p, nil
}

func (k *Keeper) binding(owner, container string) Binding {
	return Binding{Owner: owner, Container: container, Origin: k.origin}
}

// The head. Format 2 is JSON; format 1 was "<token>" or "<token> running".
type head struct {
	Format  int    `json:"format"`
	Token   string `json:"token"`
	Fence   uint64 `json:"fence"`
	State   string `json:"state"`
	Running bool   `json:"running,omitempty"`

	legacy bool // format 1: the state is at legacyState, its token its own
}

const (
	headKey     = "head"
	headFormat  = 2
	headRunning = " running" // format 1
	legacyState = "state"    // format 1's state
	// maxHeadBytes bounds a head's read: a format 2 head is under 200
	// bytes.
	maxHeadBytes = 1 << 10
	// maxWriteAttempts bounds how often Save and MarkRunning read the
	// head again after another writer's compare-and-set won.
	maxWriteAttempts = 16
	// maxLoadAttempts bounds how often Load reads the head again when the
	// state it named was replaced by a newer save meanwhile.
	maxLoadAttempts = 4
)

// parseHead reads a head. An error wraps ErrRefused (unreadable, or naming
// a state that is not one of the folder's) or ErrForeign (a later
// format); the fence read, if any, is returned with it.
func parseHead(b []byte) (head, error) {
	if tok, running := strings.CutSuffix(string(b), headRunning); isToken(tok) {
		return head{Token: tok, Running: running, State: legacyState, legacy: true}, nil
	}
	var h head
	if err := json.Unmarshal(b, &h); err != nil || h.Format < headFormat {
		return head{}, refuse("its head is unreadable (%d bytes)", len(b))
	}
	if h.Format > headFormat {
		return h, foreign("its head is format %d, this server reads %d", h.Format, headFormat)
	}
	if !isToken(h.Token) || !isStateName(h.State) {
		return h, refuse("its head names state %q, token %q: not one of its own", h.State, h.Token)
	}
	return h, nil
}

func (h head) encode() []byte {
	b, _ := json.Marshal(head{Format: headFormat, Token: h.Token, Fence: h.Fence, State: h.State, Running: h.Running})
	return b
}

// stateName names a state written under fence.
func stateName(fence uint64, random string) string {
	return fmt.Sprintf("state-%016x-%s", fence, random)
}

// isStateName reports whether name is a state in a container's folder,
// the only names a head may point to (nothing outside the folder).
func isStateName(name string) bool {
	if name == legacyState {
		return true
	}
	rest, ok := strings.CutPrefix(name, "state-")
	return ok && len(rest) == 33 && rest[16] == '-' && isHex(rest[:16]) && isHex(rest[17:])
}

// stateFence is the fence a state's name says it was written under.
func stateFence(name string) uint64 {
	if name == legacyState {
		return 0
	}
	f, _ := strconv.ParseUint(name[len("state-"):len("state-")+16], 16, 64)
	return f
}

func isToken(s string) bool { return len(s) == tokenSize && isHex(s) }

func isHex(s string) bool {
	for _, c := range []byte(s) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return s != ""
}

func randomHex(n int) string {
	b := make([]byte, n/2)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
	return hex.EncodeToString(b)
}

// tokenSize is a checkpoint token's length in hex digits.
const tokenSize = 32

// The sealed plaintext: the token (tokenSize hex digits), the fence
// (8 bytes, big endian: format 2 only), the state.
func plaintext(token string, fence uint64, state []byte) []byte {
	plain := make([]byte, 0, tokenSize+8+len(state))
	plain = append(plain, token...)
	plain = binary.BigEndian.AppendUint64(plain, fence)
	return append(plain, state...)
}

func splitPlaintext(plain []byte, format byte) (token string, fence uint64, state []byte, err error) {
	n := tokenSize
	if format >= 2 {
		n += 8
	}
	if len(plain) < n || !isToken(string(plain[:tokenSize])) {
		return "", 0, nil, refuse("no token")
	}
	if format >= 2 {
		fence = binary.BigEndian.Uint64(plain[tokenSize:])
	}
	return string(plain[:tokenSize]), fence, plain[n:], nil
}

// noBoundReads bounds a state's read when the Keeper has no bound: what a
// wasm state can decode to (the worker's bound).
const noBoundReads = 5 << 30

// stateBound is the most a sealed state of this Keeper can be.
func (k *Keeper) stateBound() int64 {
	if k.maxBytes <= 0 {
		return noBoundReads
	}
	return int64(k.maxBytes) + tokenSize + 8 + Overhead
}

// Save seals state for the container under fence (the cluster lease
// token its writer holds; 0: no cluster) and makes it its checkpoint. It
// returns the checkpoint's token, which names this write: Load returns it
// with the state, and Head returns the token of the latest write, so a
// holder can tell that another server saved the container since.
//
// A fence below the one the container's head records is refused with
// ErrFenced, and nothing is written (a fence of 0 is never refused: one
// server, no cluster). The head records the higher of the two, so fences
// in a head only grow. A state above the Keeper's bound is ErrTooLarge,
// and the checkpoint kept is left as it was. Another error (the store's)
// leaves the checkpoint as it was or replaced by this one: when the
// store's answer to the head's write was lost, either may be the case.
func (k *Keeper) Save(ctx context.Context, owner, container string, fence uint64, state []byte) (token string, err error) {
	start := time.Now()
	defer func() { k.metrics.saved(len(state), err, time.Since(start)) }()
	p, err := k.folder(owner, container)
	if err != nil {
		return "", err
	}
	if k.maxBytes > 0 && len(state) > k.maxBytes {
		return "", fmt.Errorf("%w: %d bytes, checkpoints.max_bytes is %d", ErrTooLarge, len(state), k.maxBytes)
	}
	token = randomHex(tokenSize)
	var (
		sealed      []byte
		sealedFence uint64
		written     string // the state this save wrote last
		prevState   string // the state the head named when it was written
	)
	// Removes the state written last once a head read after it shows it
	// is not the live one (a losing or refused attempt's).
	dropWritten := func() {
		if written != "" {
			_ = k.store.Delete(context.WithoutCancel(ctx), p+written)
			written = ""
		}
	}
	for attempt := 0; ; attempt++ {
		if attempt == maxWriteAttempts {
			dropWritten()
			return "", fmt.Errorf("checkpoint: the head of container %s changed under %d writes in a row", container, attempt)
		}
		b, version, err := k.store.GetVersion(ctx, p+headKey, maxHeadBytes)
		var cur head
		curErr := error(ErrNone)
		switch {
		case err == nil:
			cur, curErr = parseHead(b)
		case errors.Is(err, blob.ErrNotFound):
			version = ""
		default:
			return "", err
		}
		if curErr == nil && cur.Token == token {
			// The last write landed, though its answer said otherwise (a
			// request the client retried after its answer was lost).
			k.dropState(ctx, p, prevState, written)
			return token, nil
		}
		dropWritten()
		if fence != 0 && fence < cur.Fence {
			k.metrics.fenced("save")
			return "", fmt.Errorf("%w: container %s: fence %d is below %d, its latest checkpoint's: another server holds it now", ErrFenced, container, fence, cur.Fence)
		}
		eff := max(fence, cur.Fence)
		if sealed == nil || sealedFence != eff {
			if sealed, err = k.sealer.Seal(k.binding(owner, container), plaintext(token, eff, state)); err != nil {
				return "", err
			}
			sealedFence = eff
		}
		name := stateName(eff, randomHex(16))
		if err := k.store.Put(ctx, p+name, sealed); err != nil {
			_ = k.store.Delete(context.WithoutCancel(ctx), p+name)
			return "", err
		}
		written = name
		if curErr == nil {
			prevState = cur.State
		} else {
			prevState = ""
		}
		_, err = k.store.PutIf(ctx, p+headKey, head{Token: token, Fence: eff, State: name}.encode(), version)
		if errors.Is(err, blob.ErrPrecondition) {
			continue // another writer won: read its head, decide again
		}
		if err != nil {
			return "", err // written may be the live state now: kept
		}
		k.dropState(ctx, p, prevState, written)
		return token, nil
	}
}

// dropState removes the state a head named before this save replaced it.
func (k *Keeper) dropState(ctx context.Context, p, prev, live string) {
	if prev != "" && prev != live {
		_ = k.store.Delete(context.WithoutCancel(ctx), p+prev)
	}
}

// Load returns the container's checkpoint, opened, and its token:
// ErrNone when it has none (or its head names a state that is gone), an
// error wrapping ErrRefused when the one
// kept can never be used (tampered, truncated, its head and state
// disagreeing), one wrapping ErrForeign when it is another key's,
// format's or origin's (this server cannot use it, another may), one
// wrapping ErrTooLarge for a state above what this Keeper reads, and a
// blob store's error as is.
func (k *Keeper) Load(ctx context.Context, owner, container string) (state []byte, token string, err error) {
	start := time.Now()
	defer func() { k.metrics.loaded(err, time.Since(start)) }()
	p, err := k.folder(owner, container)
	if err != nil {
		return nil, "", err
	}
	for attempt := 1; ; attempt++ {
		b, err := k.store.Get(ctx, p+headKey, maxHeadBytes)
		var h head
		noHead := errors.Is(err, blob.ErrNotFound)
		switch {
		case noHead:
			// Format 1 wrote its state before its head: a state without
			// a head is format 1's, or there is nothing.
			h = head{State: legacyState, legacy: true}
		case err != nil:
			return nil, "", err
		default:
			if h, err = parseHead(b); err != nil {
				return nil, "", err
			}
		}
		sealed, err := k.store.Get(ctx, p+h.State, k.stateBound())
		switch {
		case errors.Is(err, blob.ErrNotFound) && noHead:
			return nil, "", ErrNone
		case errors.Is(err, blob.ErrNotFound) && attempt < maxLoadAttempts:
			continue // a newer save replaced it since the head was read
		case errors.Is(err, blob.ErrNotFound):
			// Gone for good (the expiry sweep took a state whose head a
			// MarkRunning kept younger): no checkpoint.
			return nil, "", fmt.Errorf("%w: the head of container %s names state %s, which is gone", ErrNone, container, h.State)
		case errors.Is(err, blob.ErrTooLarge):
			return nil, "", fmt.Errorf("%w: %w", ErrTooLarge, err)
		case err != nil:
			return nil, "", err
		}
		plain, format, err := k.sealer.open(k.binding(owner, container), sealed)
		if err != nil {
			return nil, "", err
		}
		token, fence, state, err := splitPlaintext(plain, format)
		if err != nil {
			return nil, "", err
		}
		// The head and the state agree: the state is the one written
		// with the head (format 1 wrote them apart: its state's token is
		// its own).
		if !h.legacy && (token != h.Token || fence != stateFence(h.State) || fence > h.Fence) {
			return nil, "", refuse("its head (token %s, fence %d, state %s) and its state (token %s, fence %d) disagree", h.Token, h.Fence, h.State, token, fence)
		}
		return state, token, nil
	}
}

// Head returns the token of the container's latest checkpoint, or
// ErrNone, and whether code has run on that state since it was taken
// (MarkRunning): then the checkpoint is older than the container's
// interpreter was. It is one small read: a holder asks it before each run.
func (k *Keeper) Head(ctx context.Context, owner, container string) (token string, running bool, err error) {
	p, err := k.folder(owner, container)
	if err != nil {
		return "", false, err
	}
	b, err := k.store.Get(ctx, p+headKey, maxHeadBytes)
	if errors.Is(err, blob.ErrNotFound) {
		return "", false, ErrNone
	}
	if err != nil {
		return "", false, err
	}
	h, err := parseHead(b)
	if err != nil {
		return "", false, err
	}
	return h.Token, h.Running, nil
}

// MarkRunning records, before the first run on the state of checkpoint
// token, that code runs on it: a server that restores the checkpoint
// after this one died then knows the state it restores is older than the
// interpreter's was, and says so. fence is the writer's lease token, as
// for Save: one below the head's is refused with ErrFenced; a higher one
// is recorded, so that the holder that ran the code fences out older
// ones. A token that is no longer the container's latest (another server
// saved it since) is an error, and nothing is written; so is a container
// with no checkpoint (ErrNone).
func (k *Keeper) MarkRunning(ctx context.Context, owner, container, token string, fence uint64) error {
	p, err := k.folder(owner, container)
	if err != nil {
		return err
	}
	for attempt := 0; attempt < maxWriteAttempts; attempt++ {
		b, version, err := k.store.GetVersion(ctx, p+headKey, maxHeadBytes)
		if errors.Is(err, blob.ErrNotFound) {
			return fmt.Errorf("%w: container %s has no checkpoint to mark", ErrNone, container)
		}
		if err != nil {
			return err
		}
		h, err := parseHead(b)
		if fence != 0 && fence < h.Fence {
			k.metrics.fenced("mark_running")
			return fmt.Errorf("%w: container %s: fence %d is below %d, its latest checkpoint's: another server holds it now", ErrFenced, container, fence, h.Fence)
		}
		if err != nil {
			return err
		}
		if h.Token != token {
			return fmt.Errorf("%w: container %s: checkpoint %s is not its latest (%s is): another interpreter saved it since", ErrNotLatest, container, token, h.Token)
		}
		if h.Running && fence <= h.Fence && !h.legacy {
			return nil
		}
		h.Running, h.Fence = true, max(h.Fence, fence)
		_, err = k.store.PutIf(ctx, p+headKey, h.encode(), version)
		if errors.Is(err, blob.ErrPrecondition) {
			continue
		}
		return err
	}
	return fmt.Errorf("checkpoint: the head of container %s changed under %d writes in a row", container, maxWriteAttempts)
}

// Drop removes everything kept for the container (it expired or was
// deleted).
func (k *Keeper) Drop(ctx context.Context, owner, container string) error {
	p, err := k.folder(owner, container)
	if err != nil {
		return err
	}
	return k.store.DeletePrefix(ctx, p)
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

// maxBaseRead bounds a sealed base's read: zstd adds a few bytes per
// 128 KiB block to what it cannot compress.
const maxBaseRead = maxBaseBytes + maxBaseBytes/1024 + Overhead + 1<<10

// GetBase returns the snapshot kept under id: ErrNone when there is none,
// an error wrapping ErrRefused when it fails its check.
func (k *Keeper) GetBase(ctx context.Context, id string) (meta, image []byte, err error) {
	sealed, err := k.store.Get(ctx, baseKey(id), maxBaseRead)
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
