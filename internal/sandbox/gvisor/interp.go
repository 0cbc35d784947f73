package gvisor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
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
	"github.com/codeinterp/codeinterp/internal/sandbox/internal/cellrunner"
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

// frame is one control message, in wire's framing (wire.ReadFrame with this
// kind's bound, wire.WriteFrame). It is wire.Msg's shape, with the fields
// this kind adds (the begin frame, the run's nonce and image bounds, the
// packages found).
type frame struct {
	Kind   string        `json:"kind"`
	Run    *runRequest   `json:"run,omitempty"`
	Begin  *beginRequest `json:"begin,omitempty"`
	Ready  *readyReport  `json:"ready,omitempty"`
	Result *wire.Result  `json:"result,omitempty"`
	Fatal  string        `json:"fatal,omitempty"`

	File       *wire.FileRequest `json:"file,omitempty"`
	FileResult *wire.FileResult  `json:"file_result,omitempty"`
}

type runRequest struct {
	ID            uint64 `json:"id"`
	Code          []byte `json:"code"`
	TimeoutNanos  int64  `json:"timeout_ns"`
	Nonce         string `json:"nonce"`
	ImageMaxCount int    `json:"image_max_count"`
	ImageMaxBytes int    `json:"image_max_bytes"`
	// Warm marks the host's own warm-up run (interp.warmUp): the kernel
	// runs it in a namespace it throws away and does not count it as a cell.
	Warm bool `json:"warm,omitempty"`
}

// beginRequest is the first frame the kernel reads, cold or restored from a
// checkpoint, before any user code: what differs per session and cannot be
// in a checkpoint's spec.
type beginRequest struct {
	// AddressSpace is the session's RLIMIT_AS (0: none). The kernel lowers
	// its own limit (no privilege needed, and the code cannot raise it
	// again): sessions of one checkpoint differ in memory.
	AddressSpace int64 `json:"address_space"`
	// Net is the session's way out (nil: none, the sandbox stays sealed).
	Net *netBegin `json:"net,omitempty"`
}

// kindBegin is the frame that starts a session's kernel.
const kindBegin = "begin"

type readyReport struct {
	StartupNanos int64    `json:"startup_ns"`
	Packages     []string `json:"packages"`
	Python       string   `json:"python"`
}

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

func base64Len(n int) int { return (n + 2) / 3 * 4 }

// send writes one frame to the kernel by deadline. The kernel bounds
// nothing it reads: the host's frames are bounded where they are made (the
// pool's source and file limits), MaxFrame only backs that up.
func (it *interp) send(f *frame, deadline time.Time) error {
	_ = it.ctlIn.SetWriteDeadline(deadline)
	if err := wire.WriteFrame(it.ctlIn, f, wire.MaxFrame); err != nil {
		return fmt.Errorf("gvisor: send %s: %w", f.Kind, err)
	}
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

// warmUp runs cellrunner.WarmUpCells through the whole path of a run —
// the frames, the FIFOs, the cell runner, the figure capture, the output
// pipes and their markers — before the sandbox is handed to a session, and
// discards their output. The kernel runs them in a namespace it throws
// away, so the session starts with nothing of them
// (TestWarmUpLeavesNoState).
func (it *interp) warmUp(ctx context.Context) error {
	err := cellrunner.WarmUp(func(cell []byte) (*wire.Result, error) {
		return it.run(ctx, 0, cell, startTimeout, true)
	})
	if err != nil {
		return fmt.Errorf("gvisor: %w%s", err, it.diagSuffix())
	}
	return nil
}

// Run implements pool.Interpreter.
func (it *interp) Run(ctx context.Context, runID uint64, code []byte, timeout time.Duration) (*wire.Result, error) {
	return it.run(ctx, runID, code, timeout, false)
}

func (it *interp) run(ctx context.Context, runID uint64, code []byte, timeout time.Duration, warm bool) (*wire.Result, error) {
	select {
	case <-it.proc.Exited():
		return nil, fmt.Errorf("gvisor: the sandbox has exited (%v)%s", it.proc.Err(), it.diagSuffix())
	default:
	}
	var nb [16]byte
	if _, err := rand.Read(nb[:]); err != nil {
		return nil, fmt.Errorf("gvisor: nonce: %w", err)
	}
	nonce := hex.EncodeToString(nb[:])
	marker := endMarker(nonce)
	outDone, errDone := it.stdout.arm(marker), it.stderr.arm(marker)
	started := time.Now()
	hard := time.NewTimer(timeout + killGrace)
	defer hard.Stop()
	req := &frame{Kind: wire.KindRun, Run: &runRequest{
		ID: runID, Code: code, TimeoutNanos: timeout.Nanoseconds(), Nonce: nonce,
		ImageMaxCount: it.k.cfg.ImageMaxCount, ImageMaxBytes: it.k.cfg.ImageMaxBytes, Warm: warm,
	}}
	if err := it.send(req, started.Add(timeout+killGrace)); err != nil {
		return nil, err
	}
	result := func(status string, gone bool, detail string) *wire.Result {
		r := &wire.Result{ID: runID, Status: status, InterpreterGone: gone, Detail: detail,
			DurationNanos: time.Since(started).Nanoseconds()}
		r.Stdout, r.StdoutDropped = it.stdout.take()
		r.Stderr, r.StderrDropped = it.stderr.take()
		return r
	}
	select {
	case f, ok := <-it.frames.C():
		if !ok {
			return nil, fmt.Errorf("gvisor: control channel: %w", it.frames.Err())
		}
		res, err := it.check(f, runID)
		if err != nil {
			return nil, err
		}
		// The markers were written before the frame, on other pipes.
		// (Code that closed or replaced fd 1 or 2 gets no marker through:
		// then wait a moment, take what came, and end the kernel.)
		wait, cancel := context.WithTimeout(context.Background(), markerWait)
		defer cancel()
		lost := false
		for _, done := range []<-chan struct{}{outDone, errDone} {
			select {
			case <-done:
			case <-it.proc.Exited():
			case <-wait.Done():
				lost = true
			}
		}
		r := result(res.Status, false, res.Detail)
		r.Images, r.ImagesDropped = res.Images, res.ImagesDropped
		// A marker that did not come means fd 1 or 2 no longer reaches
		// the host (the code closed or replaced it): the kernel's later
		// output would be lost, so it goes (TestOutputDescriptorsReplaced).
		if res.Status == wire.StatusTimeout || res.InterpreterGone || lost {
			// The kernel caught its own alarm; the run's state is suspect
			// and the contract is that a timed-out interpreter is gone.
			it.Kill()
			r.InterpreterGone = true
		}
		return r, nil
	case <-it.proc.Exited():
		// A kernel ends itself right after the result of a run whose code
		// closed fd 1 or 2: its frame may be read after the exit is seen.
		// It is that run's result, and the interpreter is gone.
		select {
		case f, ok := <-it.frames.C():
			if !ok {
				break
			}
			if res, err := it.check(f, runID); err == nil {
				it.waitEOF()
				r := result(res.Status, true, res.Detail)
				r.Images, r.ImagesDropped = res.Images, res.ImagesDropped
				return r, nil
			}
		case <-time.After(exitFrameWait):
		}
		it.waitEOF()
		return result(wire.StatusExited, true, fmt.Sprintf("the sandbox exited (%v)", it.proc.Err())), nil
	case <-hard.C:
		// A C loop ignores Python's alarm: only the host can end it.
		it.Kill()
		return result(wire.StatusTimeout, true, "the sandbox was killed at the time limit"), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("gvisor: run: %w", ctx.Err())
	}
}

// check validates a frame that should be run runID's result: whatever the
// guest forged, it must not pass for anything but its own session's report.
func (it *interp) check(f *frame, runID uint64) (*wire.Result, error) {
	bad := func(why string, args ...any) error {
		return fmt.Errorf("gvisor: the kernel broke protocol: "+why, args...)
	}
	if f.Kind != wire.KindResult || f.Result == nil {
		return nil, bad("sent %q while a run was waiting", f.Kind)
	}
	r := f.Result
	if r.ID != runID {
		return nil, bad("result for run %d, want %d", r.ID, runID)
	}
	switch r.Status {
	case wire.StatusOK, wire.StatusError, wire.StatusMemory, wire.StatusTimeout:
	default:
		return nil, bad("status %q", r.Status)
	}
	// InterpreterGone may come from the kernel: it says the kernel is ending
	// itself (its output descriptors were broken), which only makes the
	// host kill a sandbox the guest could end anyway.
	if len(r.Stdout) > 0 || len(r.Stderr) > 0 || r.StdoutDropped != 0 || r.StderrDropped != 0 {
		return nil, bad("the result carries fields only the host sets")
	}
	if len(r.Detail) > wire.MaxDetail {
		return nil, bad("detail of %d bytes", len(r.Detail))
	}
	if len(r.Images) > it.k.cfg.ImageMaxCount || r.ImagesDropped < 0 || r.ImagesDropped > 1<<20 {
		return nil, bad("%d images (%d dropped)", len(r.Images), r.ImagesDropped)
	}
	total := 0
	for _, img := range r.Images {
		total += len(img.Data)
		if img.MediaType != "image/png" || !bytes.HasPrefix(img.Data, []byte("\x89PNG\r\n\x1a\n")) {
			return nil, bad("an image that is not a PNG")
		}
	}
	if total > it.k.cfg.ImageMaxBytes {
		return nil, bad("%d image bytes, more than %d", total, it.k.cfg.ImageMaxBytes)
	}
	return r, nil
}

// File implements pool.Interpreter: the kernel does the operation between
// runs (see kernel.py). The guest can write to the control FIFO, so a frame
// that is not a file result is a protocol error here, and the pool checks
// the answer itself against the request (its id and bounds).
func (it *interp) File(ctx context.Context, kind string, req *wire.FileRequest) (*wire.FileResult, error) {
	select {
	case <-it.proc.Exited():
		return nil, fmt.Errorf("gvisor: the sandbox has exited (%v)%s", it.proc.Err(), it.diagSuffix())
	default:
	}
	// A frame of tens of MiB blocks until the kernel has read it: bound the
	// write by ctx too.
	dl, _ := ctx.Deadline()
	stop := context.AfterFunc(ctx, func() { _ = it.ctlIn.SetWriteDeadline(time.Now()) })
	err := it.send(&frame{Kind: kind, File: req}, dl)
	stop()
	if err != nil {
		return nil, err
	}
	select {
	case f, ok := <-it.frames.C():
		if !ok {
			return nil, fmt.Errorf("gvisor: control channel: %w", it.frames.Err())
		}
		return it.checkFile(f, kind)
	case <-it.proc.Exited():
		return nil, fmt.Errorf("gvisor: the sandbox exited during a file operation (%v)%s", it.proc.Err(), it.diagSuffix())
	case <-ctx.Done():
		return nil, fmt.Errorf("gvisor: %s: %w", kind, ctx.Err())
	}
}

// checkFile refuses a frame that is not a file result: code that forged
// one between runs must not pass it for the answer the pool waits for.
func (it *interp) checkFile(f *frame, kind string) (*wire.FileResult, error) {
	if f.Kind != wire.KindFileResult || f.FileResult == nil {
		return nil, fmt.Errorf("gvisor: the kernel broke protocol: sent %q while a %s was waiting", f.Kind, kind)
	}
	return f.FileResult, nil
}

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
		if err := os.RemoveAll(it.dir); err != nil {
			it.k.log.Warn("gvisor: remove interpreter dir", zap.String("dir", it.dir), zap.Error(err))
		}
		if it.ownImage != "" {
			_ = os.RemoveAll(it.ownImage)
		}
	})
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
