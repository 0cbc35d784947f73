package gvisor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/codeinterp/codeinterp/internal/sandbox/internal/cellrunner"
	"github.com/codeinterp/codeinterp/internal/sandbox/internal/wire"
)

// frame is one control message, in wire's framing (wire.ReadFrame with this
// kind's bound, wire.WriteFrame). It is wire.Msg's shape, with the fields
// this kind adds (the begin frame, the run's nonce and image bounds, the
// packages found).
type frame struct {
	Kind   string        `json:"kind"`
	Run    *runRequest   `json:"run,omitempty"`
	Begin  *beginRequest `json:"begin,omitempty"`
	Ready  *readyReport  `json:"ready,omitempty"`
	Result *wire.Result  `json:"result,omitempty"`
	Fatal  string        `json:"fatal,omitempty"`

	File       *wire.FileRequest `json:"file,omitempty"`
	FileResult *wire.FileResult  `json:"file_result,omitempty"`

	Shell       *shellRequest `json:"shell,omitempty"`
	ShellOutput *shellOutput  `json:"shell_output,omitempty"`
	ShellResult *shellResult  `json:"shell_result,omitempty"`
}

type runRequest struct {
	ID            uint64 `json:"id"`
	Code          []byte `json:"code"`
	TimeoutNanos  int64  `json:"timeout_ns"`
	Nonce         string `json:"nonce"`
	ImageMaxCount int    `json:"image_max_count"`
	ImageMaxBytes int    `json:"image_max_bytes"`
	// Warm marks the host's own warm-up run (interp.warmUp): the kernel
	// runs it in a namespace it throws away and does not count it as a cell.
	Warm bool `json:"warm,omitempty"`
}

// beginRequest is the first frame the kernel reads, cold or restored from a
// checkpoint, before any user code: what differs per session and cannot be
// in a checkpoint's spec.
type beginRequest struct {
	// AddressSpace is the session's RLIMIT_AS (0: none). The kernel lowers
	// its own limit (no privilege needed, and the code cannot raise it
	// again): sessions of one checkpoint differ in memory.
	AddressSpace int64 `json:"address_space"`
	// Net is the session's way out (nil: none, the sandbox stays sealed).
	Net *netBegin `json:"net,omitempty"`
}

type readyReport struct {
	StartupNanos int64    `json:"startup_ns"`
	Packages     []string `json:"packages"`
	Python       string   `json:"python"`
}

func base64Len(n int) int { return (n + 2) / 3 * 4 }

// send writes one frame to the kernel by deadline. The kernel bounds
// nothing it reads: the host's frames are bounded where they are made (the
// pool's source and file limits), MaxFrame only backs that up.
func (it *interp) send(f *frame, deadline time.Time) error {
	_ = it.ctlIn.SetWriteDeadline(deadline)
	if err := wire.WriteFrame(it.ctlIn, f, wire.MaxFrame); err != nil {
		return fmt.Errorf("gvisor: send %s: %w", f.Kind, err)
	}
	return nil
}

// check validates a frame that should be run runID's result: whatever the
// guest forged, it must not pass for anything but its own session's report.
func (it *interp) check(f *frame, runID uint64) (*wire.Result, error) {
	bad := func(why string, args ...any) error {
		return fmt.Errorf("gvisor: the kernel broke protocol: "+why, args...)
	}
	if f.Kind != wire.KindResult || f.Result == nil {
		return nil, bad("sent %q while a run was waiting", f.Kind)
	}
	r := f.Result
	if r.ID != runID {
		return nil, bad("result for run %d, want %d", r.ID, runID)
	}
	switch r.Status {
	case wire.StatusOK, wire.StatusError, wire.StatusMemory, wire.StatusTimeout:
	default:
		return nil, bad("status %q", r.Status)
	}
	// InterpreterGone may come from the kernel: it says the kernel is ending
	// itself (its output descriptors were broken), which only makes the
	// host kill a sandbox the guest could end anyway.
	if len(r.Stdout) > 0 || len(r.Stderr) > 0 || r.StdoutDropped != 0 || r.StderrDropped != 0 {
		return nil, bad("the result carries fields only the host sets")
	}
	if len(r.Detail) > wire.MaxDetail {
		return nil, bad("detail of %d bytes", len(r.Detail))
	}
	if len(r.Images) > it.k.cfg.ImageMaxCount || r.ImagesDropped < 0 || r.ImagesDropped > 1<<20 {
		return nil, bad("%d images (%d dropped)", len(r.Images), r.ImagesDropped)
	}
	total := 0
	for _, img := range r.Images {
		total += len(img.Data)
		if img.MediaType != "image/png" || !bytes.HasPrefix(img.Data, []byte("\x89PNG\r\n\x1a\n")) {
			return nil, bad("an image that is not a PNG")
		}
	}
	if total > it.k.cfg.ImageMaxBytes {
		return nil, bad("%d image bytes, more than %d", total, it.k.cfg.ImageMaxBytes)
	}
	return r, nil
}

// checkFile refuses a frame that is not a file result: code that forged
// one between runs must not pass it for the answer the pool waits for.
func (it *interp) checkFile(f *frame, kind string) (*wire.FileResult, error) {
	if f.Kind != wire.KindFileResult || f.FileResult == nil {
		return nil, fmt.Errorf("gvisor: the kernel broke protocol: sent %q while a %s was waiting", f.Kind, kind)
	}
	return f.FileResult, nil
}

// warmUp runs cellrunner.WarmUpCells through the whole path of a run —
// the frames, the FIFOs, the cell runner, the figure capture, the output
// pipes and their markers — before the sandbox is handed to a session, and
// discards their output. The kernel runs them in a namespace it throws
// away, so the session starts with nothing of them
// (TestWarmUpLeavesNoState).
func (it *interp) warmUp(ctx context.Context) error {
	err := cellrunner.WarmUp(func(cell []byte) (*wire.Result, error) {
		return it.run(ctx, 0, cell, startTimeout, true)
	})
	if err != nil {
		return fmt.Errorf("gvisor: %w%s", err, it.diagSuffix())
	}
	return nil
}

// Run implements pool.Interpreter.
func (it *interp) Run(ctx context.Context, runID uint64, code []byte, timeout time.Duration) (*wire.Result, error) {
	return it.run(ctx, runID, code, timeout, false)
}

func (it *interp) run(ctx context.Context, runID uint64, code []byte, timeout time.Duration, warm bool) (*wire.Result, error) {
	select {
	case <-it.proc.Exited():
		return nil, fmt.Errorf("gvisor: the sandbox has exited (%v)%s", it.proc.Err(), it.diagSuffix())
	default:
	}
	var nb [16]byte
	if _, err := rand.Read(nb[:]); err != nil {
		return nil, fmt.Errorf("gvisor: nonce: %w", err)
	}
	nonce := hex.EncodeToString(nb[:])
	marker := endMarker(nonce)
	outDone, errDone := it.stdout.arm(marker), it.stderr.arm(marker)
	started := time.Now()
	hard := time.NewTimer(timeout + killGrace)
	defer hard.Stop()
	req := &frame{Kind: wire.KindRun, Run: &runRequest{
		ID: runID, Code: code, TimeoutNanos: timeout.Nanoseconds(), Nonce: nonce,
		ImageMaxCount: it.k.cfg.ImageMaxCount, ImageMaxBytes: it.k.cfg.ImageMaxBytes, Warm: warm,
	}}
	if err := it.send(req, started.Add(timeout+killGrace)); err != nil {
		return nil, err
	}
	result := func(status string, gone bool, detail string) *wire.Result {
		r := &wire.Result{ID: runID, Status: status, InterpreterGone: gone, Detail: detail,
			DurationNanos: time.Since(started).Nanoseconds()}
		r.Stdout, r.StdoutDropped = it.stdout.take()
		r.Stderr, r.StderrDropped = it.stderr.take()
		return r
	}
	select {
	case f, ok := <-it.frames.C():
		if !ok {
			return nil, fmt.Errorf("gvisor: control channel: %w", it.frames.Err())
		}
		res, err := it.check(f, runID)
		if err != nil {
			return nil, err
		}
		// The markers were written before the frame, on other pipes.
		// (Code that closed or replaced fd 1 or 2 gets no marker through:
		// then wait a moment, take what came, and end the kernel.)
		wait, cancel := context.WithTimeout(context.Background(), markerWait)
		defer cancel()
		lost := false
		for _, done := range []<-chan struct{}{outDone, errDone} {
			select {
			case <-done:
			case <-it.proc.Exited():
			case <-wait.Done():
				lost = true
			}
		}
		r := result(res.Status, false, res.Detail)
		r.Images, r.ImagesDropped = res.Images, res.ImagesDropped
		// A marker that did not come means fd 1 or 2 no longer reaches
		// the host (the code closed or replaced it): the kernel's later
		// output would be lost, so it goes (TestOutputDescriptorsReplaced).
		if res.Status == wire.StatusTimeout || res.InterpreterGone || lost {
			// The kernel caught its own alarm; the run's state is suspect
			// and the contract is that a timed-out interpreter is gone.
			it.Kill()
			r.InterpreterGone = true
		}
		return r, nil
	case <-it.proc.Exited():
		// A kernel ends itself right after the result of a run whose code
		// closed fd 1 or 2: its frame may be read after the exit is seen.
		// It is that run's result, and the interpreter is gone.
		select {
		case f, ok := <-it.frames.C():
			if !ok {
				break
			}
			if res, err := it.check(f, runID); err == nil {
				it.waitEOF()
				r := result(res.Status, true, res.Detail)
				r.Images, r.ImagesDropped = res.Images, res.ImagesDropped
				return r, nil
			}
		case <-time.After(exitFrameWait):
		}
		it.waitEOF()
		return result(wire.StatusExited, true, fmt.Sprintf("the sandbox exited (%v)", it.proc.Err())), nil
	case <-hard.C:
		// A C loop ignores Python's alarm: only the host can end it.
		it.Kill()
		return result(wire.StatusTimeout, true, "the sandbox was killed at the time limit"), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("gvisor: run: %w", ctx.Err())
	}
}

// File implements pool.Interpreter: the kernel does the operation between
// runs (see kernel.py). The guest can write to the control FIFO, so a frame
// that is not a file result is a protocol error here, and the pool checks
// the answer itself against the request (its id and bounds).
func (it *interp) File(ctx context.Context, kind string, req *wire.FileRequest) (*wire.FileResult, error) {
	select {
	case <-it.proc.Exited():
		return nil, fmt.Errorf("gvisor: the sandbox has exited (%v)%s", it.proc.Err(), it.diagSuffix())
	default:
	}
	// A frame of tens of MiB blocks until the kernel has read it: bound the
	// write by ctx too.
	dl, _ := ctx.Deadline()
	stop := context.AfterFunc(ctx, func() { _ = it.ctlIn.SetWriteDeadline(time.Now()) })
	err := it.send(&frame{Kind: kind, File: req}, dl)
	stop()
	if err != nil {
		return nil, err
	}
	select {
	case f, ok := <-it.frames.C():
		if !ok {
			return nil, fmt.Errorf("gvisor: control channel: %w", it.frames.Err())
		}
		return it.checkFile(f, kind)
	case <-it.proc.Exited():
		return nil, fmt.Errorf("gvisor: the sandbox exited during a file operation (%v)%s", it.proc.Err(), it.diagSuffix())
	case <-ctx.Done():
		return nil, fmt.Errorf("gvisor: %s: %w", kind, ctx.Err())
	}
}
