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

	"github.com/codeinterp/codeinterp/sandbox/internal/wire"
	"github.com/codeinterp/codeinterp/sandbox/pool"
)

// proc is the server's handle on one worker process: a pool.Interpreter.
type proc struct {
	id      string
	cmd     *exec.Cmd
	ctl     *os.File // server → worker
	msgs    chan *wire.Msg
	exited  chan struct{} // closed once the process is reaped
	waitErr error
	diag    *tailBuffer // the worker's own stderr (never guest output)
	kind    *Kind

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

// warmNice is the scheduling niceness of a worker while it waits in the
// warm pool; handing it to a session restores 0.
const warmNice = 10

// Start implements pool.Kind: it starts a worker, has the pool confine it,
// configures it and waits until its interpreter is warm. A background start
// (a warm refill nobody waits for) runs niced, so that starting a spare
// interpreter does not slow the runs of live sessions on a busy machine.
func (k *Kind) Start(ctx context.Context, o pool.StartOptions) (_ pool.Interpreter, err error) {
	rtDir, err := os.Open(k.cfg.RuntimeDir)
	if err != nil {
		return nil, fmt.Errorf("pool: runtime dir: %w", err)
	}
	defer rtDir.Close()
	// Two pipes: the guest's output never shares a channel with control.
	toWorkerR, toWorkerW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	fromWorkerR, fromWorkerW, err := os.Pipe()
	if err != nil {
		toWorkerR.Close()
		toWorkerW.Close()
		return nil, err
	}
	diagR, diagW, err := os.Pipe()
	if err != nil {
		for _, f := range []*os.File{toWorkerR, toWorkerW, fromWorkerR, fromWorkerW} {
			f.Close()
		}
		return nil, err
	}

	args := append(append([]string(nil), k.cfg.WorkerCommand[1:]...), "serve")
	cmd := exec.Command(k.cfg.WorkerCommand[0], args...)
	cmd.Env = []string{} // non-nil: an empty environment, not the server's
	cmd.Dir = "/"
	cmd.Stdin = nil  // /dev/null
	cmd.Stdout = nil // /dev/null
	cmd.Stderr = diagW
	cmd.ExtraFiles = []*os.File{toWorkerR, fromWorkerW, rtDir} // fds 3, 4, 5 (package wire)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Pdeathsig: syscall.SIGKILL,
		Setpgid:   true,
	}
	if k.root {
		// An empty network namespace (not even loopback up) and a private
		// IPC namespace: defence in depth behind WASI, which has no sockets.
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC
	}

	startErr := k.spawner.start(cmd)
	// The child has its copies; the server keeps only its own ends.
	toWorkerR.Close()
	fromWorkerW.Close()
	diagW.Close()
	if startErr != nil {
		toWorkerW.Close()
		fromWorkerR.Close()
		diagR.Close()
		return nil, fmt.Errorf("wasm: start worker: %w", startErr)
	}

	if o.Background {
		// PRIO_PGRP reaches every thread of the worker (its own process
		// group); threads it makes later inherit the niceness.
		_ = syscall.Setpriority(syscall.PRIO_PGRP, cmd.Process.Pid, warmNice)
	}
	w := &proc{
		id:     o.ID,
		cmd:    cmd,
		ctl:    toWorkerW,
		msgs:   make(chan *wire.Msg, 4),
		exited: make(chan struct{}),
		diag:   &tailBuffer{max: 8 << 10},
		kind:   k,
	}
	go func() {
		_, _ = io.Copy(w.diag, diagR)
		diagR.Close()
	}()
	go func() {
		defer close(w.msgs)
		defer fromWorkerR.Close()
		for {
			m, err := wire.Read(fromWorkerR)
			if err != nil {
				return
			}
			w.msgs <- m
		}
	}()
	go func() {
		w.waitErr = cmd.Wait()
		close(w.exited)
	}()
	defer func() {
		if err != nil {
			w.Kill()
		}
	}()
	// The worker waits for its init message, so nothing it runs is
	// untrusted until the pool has confined and verified it.
	if err := o.Confine(cmd.Process.Pid); err != nil {
		return nil, err
	}

	init := &wire.Init{
		CacheDir:         k.cfg.CacheDir,
		GuestMemoryBytes: o.MemoryBytes,
		StdoutBytes:      o.Limits.StdoutBytes,
		StderrBytes:      o.Limits.StderrBytes,
		ScratchBytes:     o.Limits.ScratchBytes,
		ParentPID:        os.Getpid(),
		SnapshotDir:      k.countSession(),
	}
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

func (w *proc) awaitReady(ctx context.Context) error {
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case m, ok := <-w.msgs:
		switch {
		case !ok:
			<-w.exited
			return fmt.Errorf("wasm: worker died during start-up (%v): %s", w.waitErr, w.diag.String())
		case m.Kind == wire.KindFatal:
			return fmt.Errorf("wasm: worker start-up: %s", m.Fatal)
		case m.Kind != wire.KindReady:
			return fmt.Errorf("wasm: worker sent %q before ready", m.Kind)
		}
	case <-timer.C:
		return fmt.Errorf("wasm: worker not ready after %s", startTimeout)
	case <-ctx.Done():
		return fmt.Errorf("wasm: %w", ctx.Err())
	}
	return nil
}

// PID implements pool.Interpreter.
func (w *proc) PID() int { return w.cmd.Process.Pid }

// Exited implements pool.Interpreter.
func (w *proc) Exited() <-chan struct{} { return w.exited }

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
	select {
	case m, ok := <-w.msgs:
		if !ok {
			<-w.exited
			return nil, fmt.Errorf("the worker died (%v)", w.waitErr)
		}
		if m.Kind != wire.KindResult || m.Result == nil || m.Result.ID != runID {
			return nil, errors.New("the worker broke protocol")
		}
		return m.Result, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
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
	select {
	case m, ok := <-w.msgs:
		if !ok {
			<-w.exited
			return nil, fmt.Errorf("the worker died (%v)", w.waitErr)
		}
		if m.Kind != wire.KindFileResult || m.FileResult == nil || m.FileResult.ID != req.ID {
			return nil, errors.New("the worker broke protocol")
		}
		return m.FileResult, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// startTimeout bounds a worker's start-up (it loads the compiled module from
// the cache and starts CPython: well under a second normally).
const startTimeout = 60 * time.Second

// Foreground restores normal scheduling priority for a worker taken from
// the warm pool. Lowering niceness needs CAP_SYS_NICE: as non-root the
// worker stays niced, which costs speed, not safety.
func (w *proc) Foreground() {
	_ = syscall.Setpriority(syscall.PRIO_PGRP, w.cmd.Process.Pid, 0)
}

// Kill ends the worker's process group and waits until it is reaped. It is
// safe to call more than once and from several goroutines.
func (w *proc) Kill() {
	w.killOnce.Do(func() {
		w.ctl.Close()
		if w.cmd.Process != nil {
			_ = syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
			_ = w.cmd.Process.Kill()
		}
	})
	<-w.exited
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
