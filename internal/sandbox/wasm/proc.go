package wasm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/internal/spawn"
	"github.com/codeinterp/codeinterp/internal/sandbox/internal/wire"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
)

// proc is the server's handle on one worker process: a pool.Interpreter.
type proc struct {
	id         string
	p          *spawn.Process
	ctl        *os.File // server → worker
	fromWorker *os.File // worker → server, read by msgs
	msgs       *wire.Receiver[wire.Msg]
	diag       *tailBuffer // the worker's own stderr (never guest output)
	kind       *Kind
	snapshot   string // the snapshot its sessions start from ("" cold)
	// checkpointBytes bounds its checkpoints (pool.Limits.CheckpointBytes).
	checkpointBytes int64

	killOnce sync.Once
}

var _ pool.Interpreter = (*proc)(nil)

// spawner starts processes from one locked OS thread. Linux delivers the
// parent-death signal when the *thread* that forked the child exits, and the
// Go runtime may retire threads; this thread lives as long as the pool.
type spawner struct {
	reqs chan spawnReq
}

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func newSpawner() *spawner {
	s := &spawner{reqs: make(chan spawnReq)}
	go func() {
		runtime.LockOSThread()
		for r := range s.reqs {
			r.done <- r.cmd.Start()
		}
		// The thread exits with the goroutine (it stays locked): every worker
		// it started gets its parent-death signal. That only happens at Close.
	}()
	return s
}

func (s *spawner) start(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	s.reqs <- spawnReq{cmd: cmd, done: done}
	return <-done
}

func (s *spawner) stop() { close(s.reqs) }

// Start implements pool.Kind: it starts a worker, has the pool confine it,
// configures it and waits until its interpreter is warm. A background start
// (a warm refill nobody waits for) runs niced (spawn.BackgroundNice).
func (k *Kind) Start(ctx context.Context, o pool.StartOptions) (_ pool.Interpreter, err error) {
	rtDir, err := os.Open(k.cfg.RuntimeDir)
	if err != nil {
		return nil, fmt.Errorf("pool: runtime dir: %w", err)
	}
	defer rtDir.Close()
	c := spawn.Command{
		Argv:   append(append([]string(nil), k.cfg.WorkerCommand...), "serve"),
		Stderr: true,
		// fds 3, 4, 5 (package wire). Two pipes: the guest's output never
		// shares a channel with control.
		Files: []spawn.File{{ChildReads: true}, {ChildReads: false}, {Given: rtDir}},
		Start: k.spawner.start,
	}
	if k.root {
		// An empty network namespace (not even loopback up) and a private
		// IPC namespace: defence in depth behind WASI, which has no sockets.
		c.Cloneflags = syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC
	}
	p, err := spawn.Start(c)
	if err != nil {
		return nil, fmt.Errorf("wasm: start worker: %w", err)
	}
	w := &proc{
		id:         o.ID,
		p:          p,
		ctl:        p.Files[0],
		fromWorker: p.Files[1],
		msgs:       wire.Receive[wire.Msg](p.Files[1], wire.MaxFrame, 4),
		diag:       &tailBuffer{max: 8 << 10},
		kind:       k,

		checkpointBytes: o.Limits.CheckpointBytes,
	}
	go func() {
		_, _ = io.Copy(w.diag, p.Stderr)
		p.Stderr.Close()
	}()
	defer func() {
		if err != nil {
			w.Kill()
		}
	}()
	// The worker waits for its init message, so nothing it runs is
	// untrusted until the pool has confined and verified it.
	if err := p.Confine(o.Confine, o.Background); err != nil {
		return nil, err
	}

	snapshot := ""
	if o.Restore != nil {
		// A session state restores over the snapshot it was taken over.
		if k.snaps == nil {
			return nil, fmt.Errorf("%w: cold-start workers", sandbox.ErrNoCheckpoint)
		}
		if snapshot, err = k.restoreDir(ctx, o.Restore); err != nil {
			return nil, err
		}
	}
	init := &wire.Init{
		CacheDir:         k.cfg.CacheDir,
		GuestMemoryBytes: o.MemoryBytes,
		StdoutBytes:      o.Limits.StdoutBytes,
		StderrBytes:      o.Limits.StderrBytes,
		ScratchBytes:     o.Limits.ScratchBytes,
		ParentPID:        os.Getpid(),
		SnapshotDir:      snapshot,
		Restore:          o.Restore,
		CheckpointBytes:  o.Limits.CheckpointBytes,
	}
	if init.SnapshotDir == "" {
		init.SnapshotDir = k.countSession()
	}
	w.snapshot = init.SnapshotDir
	// Only a worker that recycles (a restored session, then the owner's
	// next) ever stops a guest in the process; the others are killed.
	init.Interruptible = init.SnapshotDir != "" && k.cfg.SessionsPerWorker > 1
	if k.root {
		init.DropTo = &wire.Credential{UID: k.cfg.Isolation.UID, GID: k.cfg.Isolation.GID}
	}
	if err := wire.Write(w.ctl, &wire.Msg{Kind: wire.KindInit, Init: init}); err != nil {
		return nil, fmt.Errorf("wasm: configure worker: %w", err)
	}
	if err := w.awaitReady(ctx); err != nil {
		return nil, err
	}
	return w, nil
}

// Recycle implements pool.Recycler: the worker drops its session's
// instance and restores a fresh one from its snapshot.
func (w *proc) Recycle(ctx context.Context) error {
	if w.kind.snaps == nil {
		return errors.New("wasm: cold-start workers are not recycled")
	}
	w.kind.countSession()
	if err := wire.Write(w.ctl, &wire.Msg{Kind: wire.KindNext}); err != nil {
		return errors.New("the worker stopped accepting work")
	}
	return w.awaitReady(ctx)
}

// awaitReady waits for the worker's ready (a fatal message says why it
// could not start). The control pipe ends with the worker, so a fatal
// message written just before it exited is still read.
func (w *proc) awaitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeoutCause(ctx, startTimeout, fmt.Errorf("not ready after %s", startTimeout))
	defer cancel()
	m, err := spawn.Await(ctx, w.p, w.msgs, spawn.AtEOF)
	switch {
	case errors.Is(err, spawn.ErrExited):
		return fmt.Errorf("wasm: worker died during start-up (%v): %s", w.p.Err(), w.diag.String())
	case err != nil:
		return fmt.Errorf("wasm: worker start-up: %w", err)
	case m.Kind == wire.KindFatal && m.RestoreRefused:
		// The state the worker was to restore is bad for good.
		return fmt.Errorf("%w: the worker refused the state: %s", sandbox.ErrNoCheckpoint, m.Fatal)
	case m.Kind == wire.KindFatal:
		return fmt.Errorf("wasm: worker start-up: %s", m.Fatal)
	case m.Kind != wire.KindReady:
		return fmt.Errorf("wasm: worker sent %q before ready", m.Kind)
	}
	return nil
}

// next waits for the worker's next message, between runs and file
// operations. The control pipe ends with the worker, so a message written
// just before it exited is still read.
func (w *proc) next(ctx context.Context) (*wire.Msg, error) {
	m, err := spawn.Await(ctx, w.p, w.msgs, spawn.AtEOF)
	if errors.Is(err, spawn.ErrExited) {
		return nil, fmt.Errorf("the worker died (%v)", w.p.Err())
	}
	return m, err
}

// PID implements pool.Interpreter.
func (w *proc) PID() int { return w.p.PID() }

// Exited implements pool.Interpreter.
func (w *proc) Exited() <-chan struct{} { return w.p.Exited() }

// Diagnostics implements pool.Interpreter.
func (w *proc) Diagnostics() string { return w.diag.String() }

// Run implements pool.Interpreter. The worker enforces the time limit itself
// and reports StatusTimeout with the output so far.
func (w *proc) Run(ctx context.Context, runID uint64, code []byte, timeout time.Duration) (*wire.Result, error) {
	if err := wire.Write(w.ctl, &wire.Msg{Kind: wire.KindRun, Run: &wire.Run{
		ID: runID, Code: code, TimeoutNanos: timeout.Nanoseconds(),
	}}); err != nil {
		return nil, errors.New("the worker stopped accepting work")
	}
	m, err := w.next(ctx)
	if err != nil {
		return nil, err
	}
	if m.Kind != wire.KindResult || m.Result == nil || m.Result.ID != runID {
		return nil, errors.New("the worker broke protocol")
	}
	return m.Result, nil
}

// File implements pool.Interpreter: the worker answers from its memfs
// while the guest waits for its next program.
func (w *proc) File(ctx context.Context, kind string, req *wire.FileRequest) (*wire.FileResult, error) {
	// A frame of tens of MiB blocks until the worker has read it: bound the
	// write by ctx too.
	dl, _ := ctx.Deadline()
	_ = w.ctl.SetWriteDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = w.ctl.SetWriteDeadline(time.Now()) })
	err := wire.Write(w.ctl, &wire.Msg{Kind: kind, File: req})
	stop()
	_ = w.ctl.SetWriteDeadline(time.Time{})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, errors.New("the worker stopped accepting work")
	}
	m, err := w.next(ctx)
	if err != nil {
		return nil, err
	}
	if m.Kind != wire.KindFileResult || m.FileResult == nil || m.FileResult.ID != req.ID {
		return nil, errors.New("the worker broke protocol")
	}
	return m.FileResult, nil
}

var _ pool.Checkpointer = (*proc)(nil)

// Checkpoint implements pool.Checkpointer: the worker returns its
// session's state between runs (sandbox/worker's checkpoint.go).
func (w *proc) Checkpoint(ctx context.Context) ([]byte, error) {
	if err := wire.Write(w.ctl, &wire.Msg{Kind: wire.KindCheckpoint}); err != nil {
		return nil, errors.New("the worker stopped accepting work")
	}
	m, err := w.next(ctx)
	if err != nil {
		return nil, err
	}
	if m.Kind != wire.KindCheckpointResult || m.Checkpoint == nil {
		return nil, errors.New("the worker broke protocol")
	}
	if m.Checkpoint.TooLarge {
		return nil, fmt.Errorf("%w: %w: %s", sandbox.ErrNoCheckpoint, sandbox.ErrTooLarge, m.Checkpoint.Refused)
	}
	if m.Checkpoint.Refused != "" {
		return nil, fmt.Errorf("%w: %s", sandbox.ErrNoCheckpoint, m.Checkpoint.Refused)
	}
	if max := w.checkpointBytes; max > 0 && int64(len(m.Checkpoint.State)) > max {
		// The worker bounds it itself; this only backs that up.
		return nil, fmt.Errorf("%w: %w: the session's state is %d bytes, checkpoints.max_bytes %d",
			sandbox.ErrNoCheckpoint, sandbox.ErrTooLarge, len(m.Checkpoint.State), max)
	}
	w.kind.keepBase(ctx, w.snapshot)
	return m.Checkpoint.State, nil
}

// startTimeout bounds a worker's start-up (it loads the compiled module from
// the cache and starts CPython: well under a second normally).
const startTimeout = 60 * time.Second

// Foreground implements pool.Interpreter: a worker taken from the warm
// pool gets normal priority back (its whole process group: every thread).
func (w *proc) Foreground() { w.p.Foreground() }

// Kill ends the worker's process group and waits until it is reaped. It is
// safe to call more than once and from several goroutines.
func (w *proc) Kill() {
	w.killOnce.Do(func() {
		w.ctl.Close()
		w.p.Kill()
		<-w.p.Exited()
		w.fromWorker.Close() // ends msgs' reader, if it had not read the EOF yet
	})
	<-w.p.Exited()
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.buf))
}
