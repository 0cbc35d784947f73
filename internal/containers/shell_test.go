package containers_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/containers"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
)

func shell(t *testing.T, c containers.Container, cmds ...string) containers.RunResult {
	t.Helper()
	r, err := c.Shell(context.Background(), sandbox.ShellRequest{Commands: cmds, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("shell %q: %v", cmds, err)
	}
	if len(r.Commands) != len(cmds) {
		t.Fatalf("shell %q: %+v", cmds, r)
	}
	return r
}

// TestGVisorShellAcrossReplicas: the hosted shell on a container of two
// replicas — its files become the container's files, a shell call on the
// other replica goes to the holder (the forwarded run carries the action),
// Python's state is untouched by it, its output reaches the caller piece
// by piece as the holder's commands print it, and after the holder's drain the
// container's checkpoint serves the shell on the other replica.
func TestGVisorShellAcrossReplicas(t *testing.T) {
	f := newFixture(t)
	url := redistest.Start(t)
	root, key := t.TempDir(), newKey(t)
	a := startReplicaOn(t, "gvisor", f, url, keeper(t, root, key), 0)
	b := startReplicaOn(t, "gvisor", f, url, keeper(t, root, key), 0)
	ca := open(t, a.m, containers.Spec{Owner: "o"})
	run(t, ca, "x = 41")
	r := shell(t, ca, "echo hello > report.txt && echo done", "exit 3")
	if r.Commands[0].Stdout != "done\n" || r.Commands[1].ExitCode != 3 {
		t.Fatalf("shell on A: %+v", r.Commands)
	}
	if len(r.Changed) != 1 || r.Changed[0].Path != "/mnt/data/report.txt" {
		t.Fatalf("the shell's file is not the container's: %+v", r.Changed)
	}
	ca.Close()

	cb := open(t, b.m, containers.Spec{Owner: "o", ID: ca.ID()})
	r = shell(t, cb, "cat report.txt; echo $PWD")
	if r.Commands[0].Stdout != "hello\n/mnt/data\n" {
		t.Fatalf("a shell call through B: %+v", r.Commands)
	}
	if p := run(t, cb, "print(x + 1)"); strings.TrimSpace(p.Stdout) != "42" || p.Reset {
		t.Fatalf("Python after the shell: %q reset=%v", p.Stdout, p.Reset)
	}
	// Forwarded live: the holder streams each piece of output as the
	// command prints it (cluster RunStream), before the call returns.
	early := make(chan struct{})
	var got []string
	res, err := cb.Shell(context.Background(), sandbox.ShellRequest{
		Commands: []string{"echo one; sleep 1; echo two >&2", "echo three"}, Timeout: 10 * time.Second,
		OnOutput: func(k int, stdout, stderr string) {
			got = append(got, fmt.Sprintf("%d:%s|%s", k, stdout, stderr))
			if stdout == "one\n" {
				close(early)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-early:
	default:
		t.Fatalf("no piece before the forwarded call returned: %q", got)
	}
	if strings.Join(got, ",") != "0:one\n|,0:|two\n,1:three\n|" || res.Commands[1].Stdout != "three\n" {
		t.Errorf("forwarded pieces %q, result %+v", got, res.Commands)
	}
	cb.Close()
	if b.m.Held() != 0 {
		t.Fatalf("B opened %d sandboxes of a container A holds", b.m.Held())
	}
	_ = a.m.Close() // SIGTERM: checkpointed and released
	cb2 := open(t, b.m, containers.Spec{Owner: "o", ID: ca.ID()})
	defer cb2.Close()
	if r := shell(t, cb2, "cat /mnt/data/report.txt"); r.Commands[0].Stdout != "hello\n" {
		t.Fatalf("on B after A's drain: %+v", r.Commands)
	}
}

// TestWasmHasNoShell: a WASM container refuses the shell with
// sandbox.ErrNoShell (the interceptor refuses the declaration before).
func TestWasmHasNoShell(t *testing.T) {
	f := newFixture(t)
	c := open(t, f.m, containers.Spec{Owner: "o"})
	defer c.Close()
	_, err := c.Shell(context.Background(), sandbox.ShellRequest{Commands: []string{"ls"}})
	if !errors.Is(err, sandbox.ErrNoShell) {
		t.Fatalf("a shell on WASM: %v", err)
	}
}
