package spawn

import (
	"bufio"
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/sandbox/internal/wire"
)

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	return len(ents)
}

// TestStart: the child gets its pipes at the asked descriptors and
// directions, a given file as is, an empty environment and / as its
// directory; the server is left holding only its own ends.
func TestStart(t *testing.T) {
	given, err := os.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	defer given.Close()
	before := openFDs(t)
	p, err := Start(Command{
		Argv: []string{"/bin/sh", "-c", `read x <&3; echo "got $x" >&4; pwd >&4; ls -d /proc/self/fd/5 >&4; ` +
			`tr '\0' '\n' </proc/$$/environ | grep -c . >&4; echo diag >&2`},
		Stderr: true,
		Files:  []File{{ChildReads: true}, {}, {Given: given}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.Stdout != nil || p.Stderr == nil || p.Files[0] == nil || p.Files[1] == nil || p.Files[2] != nil {
		t.Fatalf("server's ends: stdout %v, stderr %v, files %v", p.Stdout, p.Stderr, p.Files)
	}
	if _, err := p.Files[0].WriteString("hello\n"); err != nil {
		t.Fatal(err)
	}
	p.Files[0].Close()
	var lines []string
	for sc := bufio.NewScanner(p.Files[1]); sc.Scan(); {
		lines = append(lines, sc.Text())
	}
	diag, _ := bufio.NewReader(p.Stderr).ReadString('\n')
	<-p.Exited()
	if p.Err() != nil {
		t.Errorf("the child failed: %v", p.Err())
	}
	// /proc/$$/environ is what the shell was started with.
	if len(lines) != 4 || lines[0] != "got hello" || lines[1] != "/" || lines[2] != "/proc/self/fd/5" || lines[3] != "0" {
		t.Errorf("the child reported %q; want got hello, /, its fd 5 and no environment (0)", lines)
	}
	if diag != "diag\n" {
		t.Errorf("stderr %q", diag)
	}
	p.Files[1].Close()
	p.Stderr.Close()
	if after := openFDs(t); after != before {
		t.Errorf("%d descriptors open before Start, %d after the child's and the server's ends are closed", before, after)
	}
}

// TestStartFails: a child that cannot start leaves no descriptor behind.
func TestStartFails(t *testing.T) {
	before := openFDs(t)
	_, err := Start(Command{Argv: []string{"/nonexistent/program"}, Stdout: true, Stderr: true,
		Files: []File{{ChildReads: true}, {}}})
	if err == nil {
		t.Fatal("Start of a missing program succeeded")
	}
	if after := openFDs(t); after != before {
		t.Errorf("%d descriptors open before a failed Start, %d after", before, after)
	}
}

// TestConfineAndKill: Confine is given the child's pid before anything
// else, a background start is niced in its whole group until Foreground,
// and Kill ends the group.
func TestConfineAndKill(t *testing.T) {
	p, err := Start(Command{Argv: []string{"/bin/sh", "-c", "sleep 60 & wait"}})
	if err != nil {
		t.Fatal(err)
	}
	var confined int
	if err := p.Confine(func(pid int) error { confined = pid; return nil }, true); err != nil {
		t.Fatal(err)
	}
	if confined != p.PID() {
		t.Errorf("Confine was given %d, want the child's %d", confined, p.PID())
	}
	// getpriority returns 20 - nice.
	if prio, err := syscall.Getpriority(syscall.PRIO_PGRP, p.PID()); err != nil || 20-prio != BackgroundNice {
		t.Errorf("background group priority %d (%v); want nice %d", 20-prio, err, BackgroundNice)
	}
	p.Foreground()
	if prio, err := syscall.Getpriority(syscall.PRIO_PGRP, p.PID()); err != nil || 20-prio != 0 {
		t.Errorf("after Foreground nice %d (%v); want 0", 20-prio, err)
	}
	refused := errors.New("refused")
	if err := p.Confine(func(int) error { return refused }, false); !errors.Is(err, refused) {
		t.Errorf("Confine's failure: %v", err)
	}
	p.Kill()
	select {
	case <-p.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("the child outlived Kill")
	}
	// The group's other process (sleep, orphaned) is reaped by init, not
	// by us: on a loaded machine that takes a moment. Wait for it, with a
	// bound that only a process Kill missed reaches.
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(-p.PID(), 0) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a process of the group outlived Kill")
		}
	}
}

// TestAwait: at EOF a frame the child wrote just before it exited is still
// returned, then the exit; a broken frame is an error; ctx's cause is the
// error when it ends first.
func TestAwait(t *testing.T) {
	p, err := Start(Command{
		Argv:  []string{"/bin/sh", "-c", `printf '\000\000\000\020{"kind":"ready"}' >&3; exit 7`},
		Files: []File{{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Files[0].Close()
	rc := wire.Receive[wire.Msg](p.Files[0], wire.MaxFrame, 1)
	ctx := context.Background()
	<-p.Exited()
	m, err := Await(ctx, p, rc, AtEOF)
	if err != nil || m.Kind != wire.KindReady {
		t.Fatalf("Await = %+v, %v; want the ready frame written before the exit", m, err)
	}
	if _, err := Await(ctx, p, rc, AtEOF); !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "exit status 7") {
		t.Errorf("Await after the last frame: %v; want ErrExited with exit status 7", err)
	}

	p, err = Start(Command{Argv: []string{"/bin/sh", "-c", `printf 'xxxx' >&3; sleep 60`}, Files: []File{{}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { p.Kill(); <-p.Exited(); p.Files[0].Close() }()
	rc = wire.Receive[wire.Msg](p.Files[0], 64, 1)
	if _, err := Await(ctx, p, rc, AtExit); !errors.Is(err, wire.ErrFrameTooLarge) {
		t.Errorf("Await of a frame above the bound: %v; want ErrFrameTooLarge", err)
	}

	q, err := Start(Command{Argv: []string{"/bin/sh", "-c", "sleep 60"}, Files: []File{{}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { q.Kill(); <-q.Exited(); q.Files[0].Close() }()
	rq := wire.Receive[wire.Msg](q.Files[0], wire.MaxFrame, 1)
	late := errors.New("not ready in time")
	tctx, cancel := context.WithTimeoutCause(ctx, 50*time.Millisecond, late)
	defer cancel()
	if _, err := Await(tctx, q, rq, AtEOF); !errors.Is(err, late) {
		t.Errorf("Await past ctx's deadline: %v; want its cause", err)
	}
	q.Kill()
	if _, err := Await(ctx, q, rq, AtExit); !errors.Is(err, ErrExited) {
		t.Errorf("Await of a killed child, AtExit: %v; want ErrExited", err)
	}
}
