package containers

import (
	"context"

	"github.com/codeinterp/codeinterp/internal/sandbox"
)

// action is what one run of a container does: a Python cell (Code), or
// the hosted shell's commands (Shell). Both go the same way — the lease,
// the holder, the files' mirror and settle, the checkpoint — and differ
// only in the session call at the end.
type action struct {
	Code  string
	Shell *sandbox.ShellRequest
}

func (a action) run(ctx context.Context, s sandbox.Session) (sandbox.Result, error) {
	if a.Shell != nil {
		return sandbox.Shell(ctx, s, *a.Shell)
	}
	return s.Run(ctx, a.Code)
}

// noShellCode is the Code a forwarded shell call carries for a holder
// that predates the shell and ignores Shell: it fails there as Python,
// saying why, instead of running nothing and succeeding.
const noShellCode = `raise RuntimeError("the server holding this container cannot run shell commands (an older version); retry once it is upgraded")`
