package gvisor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/cgroup"
	"github.com/codeinterp/codeinterp/internal/sandbox/internal/spawn"
	"github.com/codeinterp/codeinterp/internal/sandbox/internal/wire"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
)

// Timing bounds.
const (
	startTimeout  = 60 * time.Second       // sandbox boot + heavy imports; ≈2 s here
	killGrace     = 1 * time.Second        // past a run's timeout before the host kills the sandbox
	markerWait    = 2 * time.Second        // for the end markers once the result frame is in
	exitFrameWait = 200 * time.Millisecond // for a result frame sent just before the sandbox exited
	eofWait       = 2 * time.Second        // for the output pipes to end once the sandbox died
	diagTail      = 4 << 10                // bytes of runsc's log kept for Diagnostics
	frameSlack    = 1 << 20                // frame bytes beyond the images' base64
)

// kindBegin is the frame that starts a session's kernel.
const kindBegin = "begin"

// interp is one sandbox: the runsc process (the launcher, exec'd), its
// gofer and sentry, and the kernel inside.
type interp struct {
	k        *Kind
	id       string
	dir      string         // per-interpreter: bundle, FIFOs, runsc state and log
	proc     *spawn.Process // the launcher, which becomes runsc (nil until it started)
	group    cgroup.Group
	limits   pool.Limits
	maxFrame int

	ctlIn, ctlOut  *os.File
	frames         *wire.Receiver[frame] // the kernel's, from ctlOut
	stdout, stderr *stream

	packages []string
	python   string
	startup  time.Duration

	// network: the sandbox has the egress mount (netDir) and may connect
	// to the host socket there; egressL is the proxy's listener on it
	// (nil for a template), closed by Kill.
	network bool
	egressL net.Listener

	// ownImage is a session image this sandbox was restored from, removed
	// with it ("" for none).
	ownImage string

	killOnce sync.Once
	diagMu   sync.Mutex
	diag     string
}

// startMode says how start brings a sandbox up.
type startMode int

const (
	// coldStart runs a new sandbox (runsc run): the kernel imports the
	// stack, reports ready and is sent its begin frame.
	coldStart startMode = iota
	// templateStart runs a new sandbox and stops at the kernel's first
	// ready, for checkpoints.take to checkpoint: no begin, never a session.
	templateStart
	// restoreStart restores a checkpoint (runsc restore): the kernel
	// resumes waiting for its begin frame.
	restoreStart
	// sessionStart restores a session's checkpoint (session.go): the
	// kernel resumes past its begin, waiting for the next cell.
	sessionStart
)

// start brings up one sandbox. network gives it the egress mount and
// runsc's --host-uds=open (a template for network sessions has them with
// no proxy behind: o.Egress is nil then).
func (k *Kind) start(ctx context.Context, o pool.StartOptions, mode startMode, img *image, network bool) (_ *interp, err error) {
	if !safeID(o.ID) {
		return nil, fmt.Errorf("gvisor: interpreter id %q is not safe in file names", o.ID)
	}
	started := time.Now()
	it := &interp{
		k:        k,
		id:       "ci-" + o.ID,
		dir:      filepath.Join(k.cfg.StateDir, "i-"+o.ID),
		group:    o.Group,
		limits:   o.Limits,
		maxFrame: base64Len(max(k.cfg.ImageMaxBytes, sandbox.MaxFileBytes)) + frameSlack,
		stdout:   newStream(o.Limits.StdoutBytes),
		stderr:   newStream(o.Limits.StderrBytes),
		network:  network,
	}
	if err := os.Mkdir(it.dir, 0o700); err != nil {
		return nil, fmt.Errorf("gvisor: interpreter dir: %w", err)
	}
	defer func() {
		if err != nil {
			it.Kill()
		}
	}()
	ctl := filepath.Join(it.dir, "ctl")
	bundle := filepath.Join(it.dir, "bundle")
	state := filepath.Join(it.dir, "state")
	for _, d := range []string{ctl, bundle, state} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, fmt.Errorf("gvisor: %w", err)
		}
	}
	in, out := filepath.Join(ctl, "in"), filepath.Join(ctl, "out")
	for _, f := range []string{in, out} {
		if err := unix.Mkfifo(f, 0o600); err != nil {
			return nil, fmt.Errorf("gvisor: mkfifo: %w", err)
		}
		if err := os.Chown(f, int(k.cfg.UID), int(k.cfg.GID)); err != nil {
			return nil, fmt.Errorf("gvisor: chown fifo: %w", err)
		}
	}
	// O_RDWR: the open does not wait for the kernel, and the host's end
	// never sees EOF (the sandbox's death is learnt from runsc's exit).
	if it.ctlIn, err = os.OpenFile(in, os.O_RDWR, 0); err != nil {
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	if it.ctlOut, err = os.OpenFile(out, os.O_RDWR, 0); err != nil {
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	// A restored sandbox keeps its checkpoint's tmpfs sizes and rlimits
	// whatever this spec says (only the mount sources, here the FIFOs, are
	// new), so the spec depends on nothing else of the session: imageKey
	// holds what it does depend on, and RLIMIT_AS comes in the begin frame.
	var netDir string
	var nb *netBegin
	if network {
		if netDir, nb, err = it.serveEgress(o.Egress); err != nil {
			return nil, err
		}
	}
	key := k.imageKey(o.Limits, network)
	spec := bundleParams{
		root: k.cfg.RootFS, identity: k.identity, ctlIn: in, ctlOut: out, netDir: netDir,
		args:         []string{k.cfg.PythonPath, "-E", "-s", "-u", "-B", "-c", kernelSource},
		uid:          k.cfg.UID,
		gid:          k.cfg.GID,
		scratchBytes: key.scratchBytes,
		nproc:        key.nproc,
	}.spec()
	if err := writeBundle(bundle, spec); err != nil {
		return nil, err
	}

	args := it.runscArgs()
	switch mode {
	case restoreStart, sessionStart:
		if mode == sessionStart {
			// The sandbox owns its session image (removed by Kill): with
			// --background runsc reads pages from it after restore returns.
			it.ownImage = img.dir
		}
		args = append(append(args, "restore", "--image-path="+img.dir, "--bundle="+bundle), k.features.restoreFlags()...)
		args = append(args, it.id)
	default:
		args = append(args, "run", "--bundle="+bundle, it.id)
	}

	// The launcher waits for a byte on its gate (fd 3) before it execs
	// runsc: nothing runs before the pool has confined it.
	p, err := spawn.Start(spawn.Command{
		Argv:   append(append([]string(nil), k.cfg.LauncherCommand...), args...),
		Stdout: true,
		Stderr: true,
		Files:  []spawn.File{{ChildReads: true}},
	})
	if err != nil {
		return nil, fmt.Errorf("gvisor: start launcher: %w", err)
	}
	it.proc = p
	gate := p.Files[0]
	// Closing the gate before the byte went out is EOF to the launcher,
	// which then exits without running runsc.
	defer gate.Close()
	go it.stdout.drain(p.Stdout)
	go it.stderr.drain(p.Stderr)
	// Never niced, even for a background start: the sentry sets its
	// threads' priorities itself (systrap runs its stub threads at the
	// sentry's own nice + 1, fixed when it starts, so a niced start would
	// leave every stub thread made later niced for the sandbox's life),
	// and with a cgroup per sandbox a thread's nice value competes only
	// inside its own group anyway. The pool keeps refills off a first
	// call's core by when it starts them.
	if err := p.Confine(o.Confine, false); err != nil {
		return nil, fmt.Errorf("gvisor: confine the launcher: %w", err)
	}
	if _, err := gate.Write([]byte{1}); err != nil {
		return nil, fmt.Errorf("gvisor: release the launcher: %w", err)
	}
	it.frames = wire.Receive[frame](it.ctlOut, it.maxFrame, 1)

	ctx, cancel := context.WithTimeoutCause(ctx, startTimeout, fmt.Errorf("not ready after %s", startTimeout))
	defer cancel()
	if mode == coldStart || mode == templateStart {
		if err := it.awaitReady(ctx); err != nil {
			return nil, err
		}
	}
	if mode == sessionStart {
		// The session's kernel waits for its next cell: nothing to send.
		// The warm-up (in a namespace the kernel throws away) proves the
		// restore worked before a session is handed it, and faults in
		// the pages a first call would wait for.
		if err := it.warmUp(ctx); err != nil {
			return nil, err
		}
	}
	if mode == coldStart || mode == restoreStart {
		as := k.cfg.AddressSpaceBytes
		if as == 0 {
			as = o.MemoryBytes + DefaultAddressSpaceSlack
		}
		dl, _ := ctx.Deadline()
		if err := it.send(&frame{Kind: kindBegin, Begin: &beginRequest{AddressSpace: max(as, 0), Net: nb}}, dl); err != nil {
			return nil, err
		}
		if err := it.awaitReady(ctx); err != nil {
			return nil, err
		}
		if err := it.warmUp(ctx); err != nil {
			return nil, err
		}
	}
	it.startup = time.Since(started)
	k.log.Debug("gvisor interpreter ready", zap.String("id", o.ID), zap.Duration("startup", it.startup))
	return it, nil
}

// runscArgs are runsc's global flags for this sandbox, the same for every
// command (run, restore, checkpoint).
func (it *interp) runscArgs() []string {
	cfg := it.k.cfg
	args := []string{
		cfg.RunscPath,
		"--root=" + filepath.Join(it.dir, "state"),
		"--network=none",
		"--platform=" + cfg.Platform,
		"--host-fifo=open",
		"--host-uds=" + it.hostUDS(),
		"--ignore-cgroups",
		"--log=" + filepath.Join(it.dir, "runsc.log"),
		"--panic-log=" + filepath.Join(it.dir, "runsc.log"),
	}
	if cfg.Debug {
		args = append(args, "--debug", "--strace", "--debug-log="+it.dir+"/")
	}
	return args
}

// awaitReady waits for the kernel's ready frame. The host holds the
// control FIFO open too, so it never ends: the sandbox's exit is learnt
// from runsc's.
func (it *interp) awaitReady(ctx context.Context) error {
	f, err := spawn.Await(ctx, it.proc, it.frames, spawn.AtExit)
	switch {
	case errors.Is(err, spawn.ErrExited):
		return fmt.Errorf("gvisor: sandbox exited during start-up (%v)%s", it.proc.Err(), it.diagSuffix())
	case err != nil:
		return fmt.Errorf("gvisor: kernel start-up: %w%s", err, it.diagSuffix())
	case f.Kind != wire.KindReady || f.Ready == nil:
		return fmt.Errorf("gvisor: kernel sent %q before ready%s", f.Kind, it.diagSuffix())
	}
	it.packages, it.python = f.Ready.Packages, f.Ready.Python
	return nil
}

// PID implements pool.Interpreter: the launcher, which became runsc.
func (it *interp) PID() int { return it.proc.PID() }

// Exited implements pool.Interpreter.
func (it *interp) Exited() <-chan struct{} { return it.proc.Exited() }

// Foreground implements pool.Interpreter. It has nothing to undo: a
// background start is not niced (see start): the pool holds refills back
// by when it starts them.
func (it *interp) Foreground() {}

// waitEOF gives the output pipes a moment to deliver what the dead sandbox
// wrote.
func (it *interp) waitEOF() {
	t := time.NewTimer(eofWait)
	defer t.Stop()
	for _, s := range []*stream{it.stdout, it.stderr} {
		select {
		case <-s.eof:
		case <-t.C:
			return
		}
	}
}

// Kill implements pool.Interpreter: SIGKILL to the runsc process group and
// to every process in the cgroup (the gofer and sentry are runsc's children
// in their own sessions), reap runsc, then remove the interpreter's files.
func (it *interp) Kill() {
	it.killOnce.Do(func() {
		if it.proc != nil {
			it.proc.Kill()
			if it.group != nil {
				if err := it.group.KillAll(); err != nil {
					it.k.log.Warn("gvisor: kill the cgroup", zap.String("id", it.id), zap.Error(err))
				}
			}
			<-it.proc.Exited()
		}
		it.captureDiag()
		if it.group == nil || it.proc == nil {
			// Without a cgroup the sandbox's other processes are only
			// reachable through runsc's state.
			it.runscDelete()
		}
		if it.ctlIn != nil {
			it.ctlIn.Close()
		}
		if it.ctlOut != nil {
			it.ctlOut.Close()
		}
		if it.proc != nil {
			it.waitEOF()
		}
		if it.egressL != nil {
			_ = it.egressL.Close()
		}
		unmountNullNetNS(filepath.Join(it.dir, "state"))
		if err := os.RemoveAll(it.dir); err != nil {
			it.k.log.Warn("gvisor: remove interpreter dir", zap.String("dir", it.dir), zap.Error(err))
		}
		if it.ownImage != "" {
			_ = os.RemoveAll(it.ownImage)
		}
	})
}

// nullNetNS is the file under a runsc root (--root, which is also its
// --shared-root) where runsc since 2026-08 bind-mounts the empty network
// namespace its gofers join (specutils.NullNetNSFilename).
const nullNetNS = "null-netns"

// unmountNullNetNS detaches every bind mount of the null network namespace
// under the runsc root dir, as runsc's own specutils.UnmountNullNetNS
// does: runsc leaves it mounted when the sandbox ends, and removing the
// directory under it fails with EBUSY (a leaked mount and directory per
// sandbox). Concurrent runsc starts may stack mounts on the one path, so
// it unmounts until none is left.
func unmountNullNetNS(root string) {
	path := filepath.Join(root, nullNetNS)
	for unix.Unmount(path, unix.MNT_DETACH) == nil {
	}
}

func (it *interp) runscDelete() {
	state := filepath.Join(it.dir, "state")
	if _, err := os.Stat(filepath.Join(state, it.id)); err != nil {
		if entries, _ := os.ReadDir(state); len(entries) == 0 {
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = exec.CommandContext(ctx, it.k.cfg.RunscPath, "--root="+state, "delete", "--force", it.id).Run()
}

func (it *interp) captureDiag() {
	b, _ := os.ReadFile(filepath.Join(it.dir, "runsc.log"))
	if len(b) > diagTail {
		b = b[len(b)-diagTail:]
	}
	it.diagMu.Lock()
	it.diag = string(b)
	it.diagMu.Unlock()
}

// Diagnostics implements pool.Interpreter: the tail of runsc's own log
// (kept by Kill, which removes the file).
func (it *interp) Diagnostics() string {
	it.diagMu.Lock()
	d := it.diag
	it.diagMu.Unlock()
	if d != "" {
		return d
	}
	b, _ := os.ReadFile(filepath.Join(it.dir, "runsc.log"))
	return string(b[max(0, len(b)-diagTail):])
}

func (it *interp) diagSuffix() string {
	d := it.Diagnostics()
	if d == "" {
		return ""
	}
	return "; runsc log: " + d
}
