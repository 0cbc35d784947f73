package gvisor

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// fdGate is the launcher's inherited pipe (os/exec ExtraFiles start at 3):
// one byte on it means "you are confined, go".
const fdGate = 3

// LaunchMain is the launcher: the server binary, re-executed with a hidden
// command and args = [runsc, runsc's arguments...]. It waits for the server
// to put it in the interpreter's cgroup (one byte on fd 3), then becomes
// runsc, so that runsc and every process it forks (gofer, sentry) start
// inside the group. It execs nothing but a root-owned binary named runsc.
// It returns only on failure, with the exit code.
func LaunchMain(args []string) int {
	if err := launch(args); err != nil {
		fmt.Fprintf(os.Stderr, "gvisor launcher: %v\n", err)
		return 2
	}
	return 0 // unreachable: launch execs or fails
}

func launch(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: launcher RUNSC [ARG]")
	}
	if err := checkRunsc(args[0]); err != nil {
		return err
	}
	var b [1]byte
	n, err := syscall.Read(fdGate, b[:])
	if err != nil || n != 1 {
		// The server died or refused to confine us: never run unconfined.
		return fmt.Errorf("no go-ahead on fd %d (%d, %v)", fdGate, n, err)
	}
	if err := syscall.Close(fdGate); err != nil {
		return fmt.Errorf("close gate: %w", err)
	}
	return syscall.Exec(args[0], args, []string{})
}

// checkRunsc refuses any program but runsc: an absolute, clean path to a
// regular root-owned file named runsc… that only root can write.
func checkRunsc(path string) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path || !strings.HasPrefix(filepath.Base(path), "runsc") {
		return fmt.Errorf("refusing to exec %q: not an absolute path to runsc", path)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Uid != 0 || st.Mode&0o022 != 0 {
		return fmt.Errorf("refusing to exec %s: not a regular root-owned file writable only by root", path)
	}
	return nil
}
