package spawn

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/codeinterp/codeinterp/internal/sandbox/internal/wire"
)

// Ending says how a process's end shows on its control channel.
type Ending int

const (
	// AtEOF: the channel is a pipe only the child writes to, so it ends
	// after the child's last frame. Its exit is learnt from the EOF: a
	// frame written just before the exit is never lost to it.
	AtEOF Ending = iota
	// AtExit: the channel does not end with the child (a FIFO the server
	// holds open too): the child's exit ends the wait.
	AtExit
)

// ErrExited is Await's error when the process ended instead of sending a
// frame.
var ErrExited = errors.New("the process exited")

// Await returns the next frame rc reads from process p's control channel.
// It fails when ctx ends (with context.Cause, so that a caller's own
// timeout can say what timed out), when the channel breaks (a malformed
// frame), or when p ends first, as ending says it shows: then the error is
// ErrExited, saying how p ended.
func Await[T any](ctx context.Context, p *Process, rc *wire.Receiver[T], ending Ending) (*T, error) {
	var exited <-chan struct{} // nil: AtEOF waits for the EOF instead
	if ending == AtExit {
		exited = p.Exited()
	}
	select {
	case f, ok := <-rc.C():
		if ok {
			return f, nil
		}
		if err := rc.Err(); !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("control channel: %w", err)
		}
		// The child closed its end: it is ending.
		select {
		case <-p.Exited():
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	case <-exited:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	return nil, fmt.Errorf("%w (%v)", ErrExited, p.Err())
}
