package cellrunner

import (
	_ "embed"
	"fmt"

	"github.com/codeinterp/codeinterp/internal/sandbox/internal/wire"
)

//go:embed cellrunner.py
var source string

// Prepend returns kernel's source with the cell runner before it: the
// program the interpreter is to run. What the kernel runs depends on both,
// so anything that identifies it (a snapshot's recipe, a checkpoint's
// stamp) must be computed from this, not from the kernel's file alone.
func Prepend(kernel string) string { return source + "\n" + kernel }

// WarmUpCells are the trusted cells a kernel's host runs through the whole
// path of a run before it hands an interpreter to a session, in a
// namespace the kernel throws away: one expression (the one-compile path)
// and a statement with a last expression (the general one). Each prints
// warmUpOutput. A restored interpreter faults in its memory's pages as
// they are first touched and Python fills its caches on first use; after
// these, a session's first call finds them touched, like its second.
var WarmUpCells = []string{"print(25)", "_w = 25\n_w"}

// warmUpOutput is what each of WarmUpCells prints.
const warmUpOutput = "25\n"

// WarmUp runs each of WarmUpCells with run — the kind's own run path, told
// that this is a warm-up — and fails unless each completed, printing what
// it should, with the interpreter still there.
func WarmUp(run func(cell []byte) (*wire.Result, error)) error {
	for _, cell := range WarmUpCells {
		r, err := run([]byte(cell))
		if err != nil {
			return fmt.Errorf("warm-up run: %w", err)
		}
		if r.Status != wire.StatusOK || r.InterpreterGone || string(r.Stdout) != warmUpOutput {
			return fmt.Errorf("warm-up run: %s (%s), stdout %.80q, stderr %.200q", r.Status, r.Detail, r.Stdout, r.Stderr)
		}
	}
	return nil
}
