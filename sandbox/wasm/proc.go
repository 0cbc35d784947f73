package pool

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/codeinterp/codeinterp/sandbox/cgroup"
	"github.com/codeinterp/codeinterp/sandbox/internal/wire"
)

// proc is the server's handle on one worker process.
type proc struct {
	id       string
	cmd      *exec.Cmd
	group    cgroup.Group // nil when isolation is off
	ctl      *os.File     // server → worker
	msgs     chan *wire.Msg
	exited   chan struct{} // closed once the process is reaped
	waitErr  error
	diag     *tailBuffer // the worker's own stderr (never guest output)
	guestMem int64

	killOnce    sync.Once
	releaseOnce sync.Once
}

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

// spawnOpts are the per-worker settings.
type spawnOpts struct {
	id       string
	guestMem int64
	// background marks a spawn nobody is waiting for (a warm refill): it
	// runs niced, so that starting a spare interpreter does not slow the
	// runs of live sessions on a busy machine.
	background bool
}

// warmNice is the scheduling niceness of a worker while it waits in the
// warm pool; handing it to a session restores 0.
const warmNice = 10

// spawn starts a worker, confines it, configures it and waits until its
// interpreter is warm.
func (p *Pool) spawn(ctx context.Context, o spawnOpts) (_ *proc, err error) {
	rtDir, err := os.Open(p.cfg.RuntimeDir)
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

	args := append(append([]string(nil), p.cfg.WorkerCommand[1:]...), "serve")
	cmd := exec.Command(p.cfg.WorkerCommand[0], args...)
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
	if p.root {
		// An empty network namespace (not even loopback up) and a private
		// IPC namespace: defence in depth behind WASI, which has no sockets.
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC
	}

	startErr := p.spawner.start(cmd)
	// The child has its copies; the server keeps only its own ends.
	toWorkerR.Close()
	fromWorkerW.Close()
	diagW.Close()
	if startErr != nil {
		toWorkerW.Close()
		fromWorkerR.Close()
		diagR.Close()
		return nil, fmt.Errorf("pool: start worker: %w", startErr)
	}

	if o.background {
		// PRIO_PGRP reaches every thread of the worker (its own process
		// group); threads it makes later inherit the niceness.
		_ = syscall.Setpriority(syscall.PRIO_PGRP, cmd.Process.Pid, warmNice)
	}
	w := &proc{
		id:       o.id,
		cmd:      cmd,
		ctl:      toWorkerW,
		msgs:     make(chan *wire.Msg, 4),
		exited:   make(chan struct{}),
		diag:     &tailBuffer{max: 8 << 10},
		guestMem: o.guestMem,
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
	p.track(w)
	defer func() {
		if err != nil {
			w.kill()
			p.release(w)
		}
	}()

	if p.cg != nil {
		g, err := p.cg.New("w-"+o.id, cgroup.Limits{
			MemoryBytes: o.guestMem + p.cfg.Limits.WorkerOverheadBytes,
			Pids:        p.cfg.Limits.Pids,
			CPUs:        p.cfg.Limits.CPUs,
		})
		if err != nil {
			return nil, fmt.Errorf("pool: %w", err)
		}
		w.group = g
		if err := g.Add(cmd.Process.Pid); err != nil {
			return nil, fmt.Errorf("pool: %w", err)
		}
		// Fail closed: no guest code runs unless the kernel confirms it.
		if err := g.Verify(cmd.Process.Pid); err != nil {
			return nil, fmt.Errorf("pool: %w", err)
		}
	}

	init := &wire.Init{
		CacheDir:         p.cfg.CacheDir,
		GuestMemoryBytes: o.guestMem,
		StdoutBytes:      p.cfg.Limits.StdoutBytes,
		StderrBytes:      p.cfg.Limits.StderrBytes,
		ScratchBytes:     p.cfg.Limits.ScratchBytes,
		ParentPID:        os.Getpid(),
	}
	if p.root {
		init.DropTo = &wire.Credential{UID: p.cfg.Isolation.UID, GID: p.cfg.Isolation.GID}
	}
	if err := wire.Write(w.ctl, &wire.Msg{Kind: wire.KindInit, Init: init}); err != nil {
		return nil, fmt.Errorf("pool: configure worker: %w", err)
	}
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case m, ok := <-w.msgs:
		switch {
		case !ok:
			<-w.exited
			return nil, fmt.Errorf("pool: worker died during start-up (%v): %s", w.waitErr, w.diag.String())
		case m.Kind == wire.KindFatal:
			return nil, fmt.Errorf("pool: worker start-up: %s", m.Fatal)
		case m.Kind != wire.KindReady:
			return nil, fmt.Errorf("pool: worker sent %q before ready", m.Kind)
		}
	case <-timer.C:
		return nil, fmt.Errorf("pool: worker not ready after %s", startTimeout)
	case <-ctx.Done():
		return nil, fmt.Errorf("pool: %w", ctx.Err())
	}
	return w, nil
}

// startTimeout bounds a worker's start-up (it loads the compiled module from
// the cache and starts CPython: well under a second normally).
const startTimeout = 60 * time.Second

// foreground restores normal scheduling priority for a worker taken from
// the warm pool. Lowering niceness needs CAP_SYS_NICE: as non-root the
// worker stays niced, which costs speed, not safety.
func (w *proc) foreground() {
	_ = syscall.Setpriority(syscall.PRIO_PGRP, w.cmd.Process.Pid, 0)
}

// kill ends the worker's process group and waits until it is reaped. It is
// safe to call more than once and from several goroutines.
func (w *proc) kill() {
	w.killOnce.Do(func() {
		w.ctl.Close()
		if w.cmd.Process != nil {
			_ = syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
			_ = w.cmd.Process.Kill()
		}
	})
	<-w.exited
}

// oomKilled reports whether the kernel's OOM killer ended the worker.
func (w *proc) oomKilled() bool {
	if w.group == nil {
		return false
	}
	n, err := w.group.OOMKills()
	return err == nil && n > 0
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
