package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/sandbox/internal/rotation"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
)

// checkpointTimeout bounds runsc checkpoint (≈0.4–0.8 s here) and the
// template sandbox's exit after it.
const checkpointTimeout = 60 * time.Second

// imageKey is what a sandbox's spec depends on besides the kind's own
// configuration: a restored sandbox keeps its checkpoint's tmpfs sizes and
// rlimits, so one image serves only sessions with the same values. A
// pool's limits are fixed, so in practice a server has one key.
type imageKey struct {
	scratchBytes int64  // size of each tmpfs (/tmp, /mnt/data)
	nproc        uint64 // RLIMIT_NPROC
	// network: the sandbox has the egress mount (guestNetDir) and runsc's
	// --host-uds=open. Nothing else of a session's network is in an image:
	// its socket is the mount's new source at restore, and the proxy's
	// address, CA and placeholders come in the begin frame.
	network bool
}

func (k *Kind) imageKey(l pool.Limits, network bool) imageKey {
	return imageKey{scratchBytes: max(l.ScratchBytes, 1<<20), nproc: guestTasks(l.Pids), network: network}
}

// image is one checkpoint: a sandbox whose kernel had imported the stack
// and was waiting for its begin frame, run by trusted code only.
type image struct {
	dir      string // holds runsc's checkpoint.img
	stamp    string // runtimeStamp when it was taken
	packages []string
	python   string

	refs    int  // restores reading it (checkpoints.mu)
	retired bool // no longer current: removed when refs reaches 0
}

// checkpoints keeps the current image per key and rotates it: a new one at
// start and after every SnapshotRotateSessions sessions, so that sessions
// do not share one hash seed for ever. An image is removed once it is no
// longer current and no restore is reading it.
type checkpoints struct {
	k   *Kind
	seq atomic.Uint64

	mu        sync.Mutex
	current   map[imageKey]*image
	limits    map[imageKey]pool.Limits // what the key's first image was taken with
	rotations map[imageKey]*rotation.Counter
	taking    sync.Mutex // serialises the synchronous takes of a missing key
	wg        sync.WaitGroup
}

func newCheckpoints(k *Kind) *checkpoints {
	return &checkpoints{k: k, current: map[imageKey]*image{}, limits: map[imageKey]pool.Limits{},
		rotations: map[imageKey]*rotation.Counter{}}
}

// runtimeStamp names what every image depends on and the server does not
// control while it runs: the runsc binary and the sandbox's root (its
// MANIFEST). An image whose stamp differs (runsc or the root rebuilt under
// a running server) is not restored; a new one is taken. The kernel, the
// spec and the configuration are fixed for the process's life, and images
// live only in its state directory, so they need no stamp. Two stats per
// session start.
func (k *Kind) runtimeStamp() string {
	var b strings.Builder
	for _, p := range []string{k.cfg.RunscPath, filepath.Join(k.cfg.RootFS, "MANIFEST")} {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			fmt.Fprintf(&b, "%s: %v\n", p, err)
			continue
		}
		fmt.Fprintf(&b, "%s %d %d %d %d.%d\n", p, st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec)
	}
	return b.String()
}

// get returns the image a new session with limits l restores from, taking
// the first one for its key when there is none, and counts the session
// (which may start a rotation in the background). The caller releases it
// once the restore has read it.
func (c *checkpoints) get(ctx context.Context, l pool.Limits, network bool) (*image, error) {
	key := c.k.imageKey(l, network)
	stamp := c.k.runtimeStamp()
	if img := c.acquire(key, stamp); img != nil {
		return img, nil
	}
	c.taking.Lock()
	defer c.taking.Unlock()
	if img := c.acquire(key, stamp); img != nil {
		return img, nil
	}
	img, err := c.take(ctx, l, network, false)
	if err != nil {
		return nil, err
	}
	c.install(key, l, img)
	if img = c.acquire(key, stamp); img == nil {
		return nil, errors.New("gvisor: the new checkpoint is already stale (runsc or the packages changed while it was taken)")
	}
	return img, nil
}

// acquire returns the current image of key with a reference, or nil when
// there is none or it is stale; it counts the session towards a rotation.
func (c *checkpoints) acquire(key imageKey, stamp string) *image {
	c.mu.Lock()
	defer c.mu.Unlock()
	img := c.current[key]
	if img == nil {
		return nil
	}
	if img.stamp != stamp {
		c.k.log.Warn("gvisor: runsc or the sandbox's packages changed; taking a new checkpoint", zap.String("image", img.dir))
		delete(c.current, key)
		c.retire(img)
		return nil
	}
	img.refs++
	r := c.rotations[key]
	if r != nil && r.Session() {
		c.wg.Add(1)
		go c.rotate(key, c.limits[key], r, img)
	}
	return img
}

// rotate takes a new image for key in the background (sessions go on
// restoring the current one meanwhile).
func (c *checkpoints) rotate(key imageKey, l pool.Limits, r *rotation.Counter, old *image) {
	defer c.wg.Done()
	ctx := c.k.ctx
	img, err := c.take(ctx, l, key.network, true)
	if err != nil {
		if ctx.Err() == nil {
			c.k.log.Error("gvisor: rotating the checkpoint failed; sessions keep the current one", zap.Error(err))
		}
		r.Done(false)
		return
	}
	c.install(key, l, img)
	r.Done(true)
	c.k.log.Info("gvisor: checkpoint rotated", zap.String("old", old.dir), zap.String("new", img.dir))
}

// install makes img the current image of key and retires the one before.
func (c *checkpoints) install(key imageKey, l pool.Limits, img *image) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.limits[key] = l
	if old := c.current[key]; old != nil {
		c.retire(old)
	}
	c.current[key] = img
	if c.rotations[key] == nil {
		c.rotations[key] = rotation.New(c.k.cfg.SnapshotRotateSessions)
	}
}

// release drops a reference taken by get.
func (c *checkpoints) release(img *image) {
	c.mu.Lock()
	defer c.mu.Unlock()
	img.refs--
	if img.retired && img.refs == 0 {
		c.remove(img)
	}
}

// retire marks img as no longer current (c.mu held).
func (c *checkpoints) retire(img *image) {
	img.retired = true
	if img.refs == 0 {
		c.remove(img)
	}
}

func (c *checkpoints) remove(img *image) {
	if err := os.RemoveAll(img.dir); err != nil {
		c.k.log.Warn("gvisor: remove checkpoint", zap.String("dir", img.dir), zap.Error(err))
	}
}

// drop retires img because a restore from it failed: the next session
// takes a new one.
func (c *checkpoints) drop(img *image) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, cur := range c.current {
		if cur == img {
			delete(c.current, key)
			c.retire(img)
		}
	}
}

// take is the trusted checkpoint step: a new sandbox runs the kernel, which
// imports the stack and reports ready, and is checkpointed while it waits
// for its begin frame — before any session exists, so no user code ever
// ran in it. The sandbox stops; its image stays.
func (c *checkpoints) take(ctx context.Context, l pool.Limits, network, background bool) (_ *image, err error) {
	started, stamp := time.Now(), c.k.runtimeStamp()
	id := "tpl-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatUint(c.seq.Add(1), 10)
	it, err := c.k.start(ctx, pool.StartOptions{
		ID:          id,
		MemoryBytes: RecommendedGuestMemoryBytes,
		Limits:      l,
		Background:  background,
		// Trusted code only, like Prepare's probe: it needs no cgroup.
		Confine: func(int) error { return nil },
	}, templateStart, nil, network)
	if err != nil {
		return nil, fmt.Errorf("gvisor: checkpoint: the template sandbox did not start: %w", err)
	}
	defer it.Kill()
	dir := filepath.Join(c.k.cfg.StateDir, "images", id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("gvisor: checkpoint: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	cctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
	defer cancel()
	args := append(append(it.runscArgs(), "checkpoint", "--image-path="+dir), c.k.features.checkpointFlags()...)
	args = append(args, it.id)
	cmd := exec.CommandContext(cctx, args[0], args[1:]...)
	cmd.Env = []string{}
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("gvisor: runsc checkpoint: %w: %s%s", err, out, it.diagSuffix())
	}
	// The checkpointed container stops: runsc run exits.
	select {
	case <-it.proc.Exited():
	case <-cctx.Done():
		return nil, fmt.Errorf("gvisor: checkpoint: the template sandbox did not stop: %w", cctx.Err())
	}
	if st, err := os.Stat(filepath.Join(dir, "checkpoint.img")); err != nil || st.Size() == 0 {
		return nil, fmt.Errorf("gvisor: checkpoint: runsc wrote no image (%v)%s", err, it.diagSuffix())
	}
	c.k.log.Info("gvisor checkpoint taken", zap.String("dir", dir), zap.Duration("took", time.Since(started)))
	return &image{dir: dir, stamp: stamp, packages: it.packages, python: it.python}, nil
}
