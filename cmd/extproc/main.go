// Command extproc is the codeinterp server: an Envoy ext_proc service that
// gives OpenAI-compatible models a code_interpreter tool backed by a
// sandbox: CPython-WASI under wazero, or Debian's CPython under gVisor.
//
//	extproc serve --config FILE           the gRPC ext_proc server
//	extproc dev --listen ADDR --upstream URL [--config FILE]
//	                                      server + Envoy-like front proxy, no Envoy needed
//	extproc exec [-c CODE | FILE | -]     run code once in the sandbox, print JSON
//	extproc validate-config FILE          check a configuration file
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/codeinterp/codeinterp/internal/sandbox/gvisor"
)

// workerCommand is the hidden command the server re-executes itself with to
// start a sandbox worker process. It is not meant to be typed by people.
const workerCommand = "__sandbox-worker"

// launcherCommand is the hidden command that becomes runsc once the server
// has confined it to a gVisor sandbox's cgroup (sandbox/gvisor.LaunchMain).
const launcherCommand = "__gvisor-launch"

// exitUsage is the exit status for bad flags or arguments.
const exitUsage = 2

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string) error
}

func commands() []command {
	return []command{
		{"serve", "run the ext_proc gRPC server", runServe},
		{"dev", "run the server behind a local Envoy-like front proxy", runDev},
		{"exec", "run Python code once in the sandbox and print a JSON result", runExec},
		{"validate-config", "check a configuration file", runValidateConfig},
	}
}

// usageError marks errors that should print usage and exit 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func main() {
	if len(os.Args) > 1 && os.Args[1] == workerCommand {
		os.Exit(runWorker(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == launcherCommand {
		os.Exit(gvisor.LaunchMain(os.Args[2:]))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := dispatch(ctx, os.Args[1:])
	stop()
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "extproc:", err)
	var ue *usageError
	if errors.As(err, &ue) {
		os.Exit(exitUsage)
	}
	os.Exit(1)
}

func dispatch(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage()
		if len(args) == 0 {
			return &usageError{"no command given"}
		}
		return nil
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:])
		}
	}
	printUsage()
	return &usageError{fmt.Sprintf("unknown command %q", args[0])}
}

// parseFlags parses a command's flags. It reports help=true when the user
// asked for -h (the usage is printed; the command should just return) and a
// usageError for anything it cannot parse.
func parseFlags(fs *flag.FlagSet, args []string) (help bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, &usageError{err.Error()}
	}
	return false, nil
}

func printUsage() {
	fmt.Fprintln(os.Stderr, "usage: extproc COMMAND [flags]\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(os.Stderr, "  %-16s %s\n", c.name, c.summary)
	}
}
