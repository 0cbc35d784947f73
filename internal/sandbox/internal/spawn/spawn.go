package spawn

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// BackgroundNice is the scheduling niceness of a background start (a warm
// refill nobody waits for), so that starting a spare interpreter does not
// slow the runs of live sessions on a busy machine.
const BackgroundNice = 10

// Command is what Start starts.
type Command struct {
	// Argv is the program and its arguments.
	Argv []string
	// Stdout and Stderr, when set, are pipes whose read ends are the
	// Process's; otherwise the child's are /dev/null, like its stdin.
	Stdout, Stderr bool
	// Files are the child's descriptors from 3 on, in order.
	Files []File
	// Cloneflags are the namespaces the child is made in (0: the server's).
	Cloneflags uintptr
	// Start starts cmd; nil means cmd.Start. The parent-death signal fires
	// when the thread that forked the child exits: a kind that must not
	// depend on the Go runtime keeping threads passes a start from a
	// thread of its own.
	Start func(cmd *exec.Cmd) error
}

// File is one of the child's extra descriptors: a file given as is, or a
// new pipe.
type File struct {
	// Given is passed as is; the caller keeps it and closes it.
	Given *os.File
	// ChildReads says which way a pipe (Given nil) goes: the child reads
	// and the server writes, or the reverse.
	ChildReads bool
}

// Process is a started process.
type Process struct {
	cmd *exec.Cmd
	// Stdout and Stderr are the server's read ends of the child's output
	// (nil unless Command asked for them); the caller closes them.
	Stdout, Stderr *os.File
	// Files are the server's ends of Command.Files' pipes, at the same
	// index (nil for a given file); the caller closes them.
	Files []*os.File

	exited  chan struct{}
	waitErr error // set before exited is closed
}

// Start starts c. Once it returns, the server holds only its own ends of
// the pipes, and the process is reaped whenever it exits (Exited).
func Start(c Command) (_ *Process, err error) {
	p := &Process{Files: make([]*os.File, len(c.Files)), exited: make(chan struct{})}
	var theirs []*os.File // the child's ends: closed once it has its copies
	defer func() {
		for _, f := range theirs {
			f.Close()
		}
		if err != nil {
			for _, f := range append([]*os.File{p.Stdout, p.Stderr}, p.Files...) {
				if f != nil {
					f.Close()
				}
			}
		}
	}()
	pipe := func(childReads bool) (mine, child *os.File, err error) {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, nil, fmt.Errorf("spawn: %w", err)
		}
		if childReads {
			mine, child = w, r
		} else {
			mine, child = r, w
		}
		theirs = append(theirs, child)
		return mine, child, nil
	}

	cmd := exec.Command(c.Argv[0], c.Argv[1:]...)
	cmd.Env = []string{} // non-nil: an empty environment, not the server's
	cmd.Dir = "/"
	if c.Stdout {
		mine, child, err := pipe(false)
		if err != nil {
			return nil, err
		}
		p.Stdout, cmd.Stdout = mine, child
	}
	if c.Stderr {
		mine, child, err := pipe(false)
		if err != nil {
			return nil, err
		}
		p.Stderr, cmd.Stderr = mine, child
	}
	for i, f := range c.Files {
		if f.Given != nil {
			cmd.ExtraFiles = append(cmd.ExtraFiles, f.Given)
			continue
		}
		mine, child, err := pipe(f.ChildReads)
		if err != nil {
			return nil, err
		}
		p.Files[i] = mine
		cmd.ExtraFiles = append(cmd.ExtraFiles, child)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
		Cloneflags: c.Cloneflags,
	}
	start := c.Start
	if start == nil {
		start = (*exec.Cmd).Start
	}
	if err := start(cmd); err != nil {
		return nil, err
	}
	p.cmd = cmd
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// PID is the process's id, which is also its process group's.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Exited is closed once the process is reaped.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err is how the process ended (exec.Cmd.Wait's error); valid once Exited
// is closed.
func (p *Process) Err() error { return p.waitErr }

// Confine has confine move the process into its interpreter's cgroup and
// verify it there (pool.StartOptions.Confine), then, for a background
// start, lowers the priority of every thread of its process group to
// BackgroundNice; threads and processes made later inherit it, and
// Foreground (or a kind's own, for processes that left the group) undoes
// it. The process must not run anything untrusted before this returns.
func (p *Process) Confine(confine func(pid int) error, background bool) error {
	if err := confine(p.PID()); err != nil {
		return err
	}
	if background {
		_ = syscall.Setpriority(syscall.PRIO_PGRP, p.PID(), BackgroundNice)
	}
	return nil
}

// Foreground restores normal priority to the process group. Lowering
// niceness needs CAP_SYS_NICE: without it the group stays niced, which
// costs speed, not safety.
func (p *Process) Foreground() { _ = syscall.Setpriority(syscall.PRIO_PGRP, p.PID(), 0) }

// Kill sends SIGKILL to the process group and to the process itself,
// should it have left the group; Exited tells when it is reaped.
func (p *Process) Kill() {
	_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
	_ = p.cmd.Process.Kill()
}
