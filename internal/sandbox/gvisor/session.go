package gvisor

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/klauspost/compress/zstd"
	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/internal/limitbuf"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
)

// Session checkpoints (issue 28): a session's whole sandbox — its Python
// objects, imports, open files, working directory and /tmp, the kernel
// waiting for its next cell — is checkpointed with runsc checkpoint
// --leave-running between cells (the session goes on), and restored into
// a new sandbox with runsc restore as the trusted images are: the same
// bundle shape, new FIFOs and output pipes as the mount sources. The
// state is runsc's image directory as a tar, zstd-compressed, after a
// header naming what it was made from; the server seals it
// (package checkpoint) before it leaves the process, so a restore only
// ever reads an image this server's key sealed.

// sessionMagic starts every session state this kind writes.
const sessionMagic = "codeinterp-gvisor-session-v1\n"

// sessionHeader says what a session state was made from: a restore under
// anything else is refused before runsc reads a byte of it.
type sessionHeader struct {
	// Runtime is runtimeDigest: runsc's version, the root's MANIFEST,
	// the platform and the kernel.
	Runtime      string   `json:"runtime"`
	ScratchBytes int64    `json:"scratch_bytes"`
	Nproc        uint64   `json:"nproc"`
	Packages     []string `json:"packages"`
	Python       string   `json:"python"`
}

// maxSessionFiles bounds the files of one image directory read back.
const maxSessionFiles = 64

// RestoresSessions implements pool.SessionRestorer: with a runsc that can
// checkpoint a running sandbox and leave it running.
func (k *Kind) RestoresSessions() bool { return k.features.leaveRunning }

// runtimeDigest names the runtime a session image belongs to: runsc's
// version, the root's MANIFEST, the platform and the kernel — what a
// replica on another machine has the same of. Prepare computes it once.
func runtimeDigest(runscVersion, rootFS, platform string) (string, error) {
	manifest, err := os.ReadFile(filepath.Join(rootFS, "MANIFEST"))
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00", runscVersion, platform, kernelSource)
	h.Write(manifest)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// CheckpointOrigin names what this kind's session checkpoints are bound
// to (checkpoint.Keeper's origin): another runsc, root or kernel refuses
// them.
func (k *Kind) CheckpointOrigin() (string, error) {
	if k.digestErr != nil {
		return "", fmt.Errorf("gvisor: %w", k.digestErr)
	}
	return "gvisor/" + k.digest[:32], nil
}

// Checkpoint implements pool.Checkpointer. The pool calls it between
// runs, while the kernel waits for its next frame.
func (it *interp) Checkpoint(ctx context.Context) ([]byte, error) {
	if it.network {
		// Its egress placeholders and proxy are this session's: a
		// restored one would hold values no proxy knows.
		return nil, fmt.Errorf("%w: a session with a network_policy is not checkpointed", sandbox.ErrNoCheckpoint)
	}
	if !it.k.features.leaveRunning {
		return nil, fmt.Errorf("%w: this runsc cannot checkpoint a running sandbox (--leave-running)", sandbox.ErrNoCheckpoint)
	}
	digest, err := it.k.digest, it.k.digestErr
	if err != nil {
		return nil, fmt.Errorf("%w: %v", sandbox.ErrNoCheckpoint, err)
	}
	started := time.Now()
	dir := filepath.Join(it.dir, "session-image-"+strconv.FormatInt(started.UnixNano(), 36))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	defer os.RemoveAll(dir)
	cctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
	defer cancel()
	args := append(append(it.runscArgs(), "checkpoint", "--image-path="+dir, "--leave-running"), it.k.features.checkpointFlags()...)
	args = append(args, it.id)
	cmd := exec.CommandContext(cctx, args[0], args[1:]...)
	cmd.Env = []string{}
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("gvisor: runsc checkpoint --leave-running: %w: %s%s", err, out, it.diagSuffix())
	}
	key := it.k.imageKey(it.limits, false)
	hdr, err := json.Marshal(sessionHeader{Runtime: digest, ScratchBytes: key.scratchBytes, Nproc: key.nproc, Packages: it.packages, Python: it.python})
	if err != nil {
		return nil, err
	}
	// The state is bounded as it is written (checkpoints.max_bytes): an
	// image of a session holding GiBs is never compressed whole into the
	// server's memory before it is found too large.
	buf := limitbuf.New(it.limits.CheckpointBytes)
	tooLarge := func() ([]byte, error) {
		it.k.log.Info("gvisor session checkpoint refused: too large", zap.String("id", it.id), zap.Int64("max_bytes", buf.Max()))
		return nil, fmt.Errorf("%w: %w: the session's state passed checkpoints.max_bytes (%d bytes) while it was written",
			sandbox.ErrNoCheckpoint, sandbox.ErrTooLarge, buf.Max())
	}
	var head []byte
	head = append(head, sessionMagic...)
	head = binary.BigEndian.AppendUint32(head, uint32(len(hdr)))
	head = append(head, hdr...)
	if _, err := buf.Write(head); err != nil {
		return tooLarge()
	}
	zw, err := zstd.NewWriter(buf, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		return nil, err
	}
	err = tarDir(zw, dir)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, limitbuf.ErrFull) {
		return tooLarge()
	}
	if err != nil {
		return nil, fmt.Errorf("gvisor: session image: %w", err)
	}
	it.k.log.Debug("gvisor session checkpointed", zap.String("id", it.id), zap.Int("bytes", buf.Len()), zap.Duration("took", time.Since(started)))
	return buf.Bytes(), nil
}

// tarDir writes dir's regular files (runsc's image: flat) as a tar.
func tarDir(w io.Writer, dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	for _, e := range ents {
		if !e.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file", e.Name())
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		st, err := f.Stat()
		if err == nil {
			err = tw.WriteHeader(&tar.Header{Name: e.Name(), Mode: 0o600, Size: st.Size(), Typeflag: tar.TypeReg})
		}
		if err == nil {
			_, err = io.Copy(tw, f)
		}
		f.Close()
		if err != nil {
			return err
		}
	}
	return tw.Close()
}

// readSession checks a session state against this kind and limits l and
// unpacks its image into dir. Every refusal of the state wraps
// sandbox.ErrNoCheckpoint; a failure of this disk while unpacking (full,
// read-only) does not: the state may unpack on a later try.
func (k *Kind) readSession(state []byte, l pool.Limits, dir string) (sessionHeader, error) {
	var h sessionHeader
	refuse := func(format string, a ...any) (sessionHeader, error) {
		return h, fmt.Errorf("%w: %s", sandbox.ErrNoCheckpoint, fmt.Sprintf(format, a...))
	}
	if !bytes.HasPrefix(state, []byte(sessionMagic)) || len(state) < len(sessionMagic)+4 {
		return refuse("not a gVisor session state")
	}
	rest := state[len(sessionMagic):]
	n := binary.BigEndian.Uint32(rest)
	rest = rest[4:]
	if uint64(n) > uint64(len(rest)) || n > 1<<20 {
		return refuse("a cut header")
	}
	if err := json.Unmarshal(rest[:n], &h); err != nil {
		return refuse("its header: %v", err)
	}
	digest, err := k.digest, k.digestErr
	if err != nil {
		return refuse("%v", err)
	}
	key := k.imageKey(l, false)
	switch {
	case h.Runtime != digest:
		return refuse("it was made by another runsc, root or kernel")
	case h.ScratchBytes != key.scratchBytes || h.Nproc != key.nproc:
		return refuse("it was made under other sandbox limits")
	}
	zr, err := zstd.NewReader(bytes.NewReader(rest[n:]), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return refuse("%v", err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	for files := 0; ; files++ {
		th, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return refuse("its image: %v", err)
		}
		name := th.Name
		if files >= maxSessionFiles || th.Typeflag != tar.TypeReg || name != filepath.Base(name) || !fs.ValidPath(name) || name == "." {
			return refuse("its image holds %q", name)
		}
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return refuse("its image holds %q twice", name)
		}
		if err != nil {
			return h, fmt.Errorf("gvisor: unpacking a session state: %w", err)
		}
		rerr, werr := copyFrom(f, tr)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if rerr != nil {
			return refuse("its image: %v", rerr)
		}
		if werr != nil {
			return h, fmt.Errorf("gvisor: unpacking a session state: %w", werr)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "checkpoint.img")); err != nil || st.Size() == 0 {
		return refuse("its image has no checkpoint.img")
	}
	return h, nil
}

// copyFrom copies r to w and says which side failed: reading r (the
// state's own fault) or writing w (this disk's).
func copyFrom(w io.Writer, r io.Reader) (rerr, werr error) {
	buf := make([]byte, 256<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return nil, werr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		if err != nil {
			return err, nil
		}
	}
}

// startRestored starts a sandbox from a session state (StartOptions.Restore):
// its kernel resumes where the session's was, waiting for the next cell.
// Only readSession refuses the state (sandbox.ErrNoCheckpoint): it is
// sealed by this server's key and its header names this runsc, root,
// kernel and limits, so a runsc restore that fails after that (a timeout,
// ctx, no memory, the sandbox not coming up) is returned as it is, never
// read as a refusal of the image.
func (k *Kind) startRestored(ctx context.Context, o pool.StartOptions) (pool.Interpreter, error) {
	if o.Egress != nil {
		return nil, fmt.Errorf("%w: a session with a network_policy is not restored", sandbox.ErrNoCheckpoint)
	}
	dir, err := os.MkdirTemp(k.cfg.StateDir, "session-")
	if err != nil {
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	t0 := time.Now()
	h, err := k.readSession(o.Restore, o.Limits, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	unpacked := time.Since(t0)
	// From here the sandbox owns dir (its Kill removes it, also when
	// start fails after it began).
	it, err := k.start(ctx, o, sessionStart, &image{dir: dir, packages: h.Packages, python: h.Python}, false)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	it.packages, it.python = h.Packages, h.Python
	k.log.Debug("gvisor session restored", zap.String("id", it.id), zap.Duration("unpack", unpacked), zap.Duration("took", time.Since(t0)))
	return it, nil
}
