package worker

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/codeinterp/codeinterp/internal/sandbox/internal/cellrunner"
	"github.com/codeinterp/codeinterp/internal/sandbox/internal/wire"
)

//go:embed bootstrap.py
var bootstrapLoop string

// bootstrap is the guest's kernel: the cell runner both kernels share, then
// bootstrap.py's loop. The snapshot recipe hashes this, the whole of it.
var bootstrap = cellrunner.Prepend(bootstrapLoop)

// wasmPageSize is the WebAssembly page size.
const wasmPageSize = 64 << 10

// Main runs a worker. args[0] is "serve" (the normal case), "precompile"
// (fill the compilation cache; runs no guest code), "snapshot", or
// "fingerprint" (print Fingerprint). It returns the process exit status.
func Main(args []string) int {
	if len(args) < 1 {
		fmt.Fprintln(os.Stderr, "worker: missing mode")
		return 2
	}
	var err error
	switch args[0] {
	case "precompile":
		if len(args) != 3 {
			err = errors.New("usage: precompile RUNTIME_DIR CACHE_DIR")
			break
		}
		err = Precompile(context.Background(), args[1], args[2])
	case "snapshot":
		if len(args) != 4 {
			err = errors.New("usage: snapshot RUNTIME_DIR CACHE_DIR OUT_DIR")
			break
		}
		err = TakeSnapshot(context.Background(), args[1], args[2], args[3])
	case "serve":
		err = serve()
	case "fingerprint":
		_, err = fmt.Println(Fingerprint())
	default:
		err = fmt.Errorf("unknown mode %q", args[0])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	return 0
}

// serve is the worker's life: one interpreter, many runs, then exit.
func serve() error {
	ctlIn := os.NewFile(wire.FDControlIn, "control-in")
	ctlOut := os.NewFile(wire.FDControlOut, "control-out")
	runtimeDir := os.NewFile(wire.FDRuntime, "runtime")
	if ctlIn == nil || ctlOut == nil || runtimeDir == nil {
		return errors.New("missing control or runtime descriptors")
	}
	if err := hardenEarly(); err != nil {
		return err
	}
	msg, err := wire.Read(ctlIn)
	if err != nil {
		return fmt.Errorf("read init: %w", err)
	}
	if msg.Kind != wire.KindInit || msg.Init == nil {
		return fmt.Errorf("first message is %q, want init", msg.Kind)
	}
	w := &worker{init: *msg.Init, ctlOut: ctlOut, runtimeDir: runtimeDir}
	if err := w.start(runtimeDir); err != nil {
		_ = w.send(&wire.Msg{Kind: wire.KindFatal, Fatal: err.Error(), RestoreRefused: errors.As(err, new(*stateRefusal))})
		return err
	}
	return w.loop(ctlIn)
}

type worker struct {
	init   wire.Init
	ctlOut *os.File
	// runtimeDir stays referenced for the process's life: the guest reaches
	// the stdlib through /proc/self/fd/N, and an unreferenced *os.File is
	// closed by its finalizer.
	runtimeDir *os.File
	sendMu     sync.Mutex

	rt      wazero.Runtime
	libDir  string
	snap    *restorer // nil: sessions start python.wasm cold
	started time.Time // when the current session's start began

	// The current session (a worker serves one at a time; with a snapshot
	// it can serve several in turn, each a fresh instance).
	scratch  *scratch
	stdinW   *io.PipeWriter
	stdout   *boundedWriter
	stderr   *markerWriter
	mod      api.Module         // the restored instance (nil on the cold path)
	stop     context.CancelFunc // ends the restored instance's execution
	exited   chan error         // the guest's entry point returned (with its error)
	sessions int
	// A checkpoint's handshake with the guest's goroutine (restored
	// sessions only): the kernel returned to the host (yielded), and may
	// go on (resume).
	yielding        atomic.Bool
	yielded, resume chan struct{}
}

func (w *worker) send(m *wire.Msg) error {
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	return wire.Write(w.ctlOut, m)
}

func (w *worker) start(runtimeDir *os.File) error {
	started := time.Now()
	ctx := context.Background()
	// Privileged part: the runtime may live where the drop-to user cannot
	// reach (e.g. root's cache). Read and compile it now.
	root := fmt.Sprintf("/proc/self/fd/%d", runtimeDir.Fd())
	pages := uint32(w.init.GuestMemoryBytes / wasmPageSize)
	if pages == 0 || pages > 65536 {
		return fmt.Errorf("guest memory %d bytes is out of range", w.init.GuestMemoryBytes)
	}
	rc := compilerConfig(w.init.Interruptible).WithMemoryLimitPages(pages)
	if w.init.CacheDir != "" {
		cache, err := wazero.NewCompilationCacheWithDir(w.init.CacheDir)
		if err != nil {
			return fmt.Errorf("compilation cache: %w", err)
		}
		rc = rc.WithCompilationCache(cache)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, rc)
	w.rt = rt
	w.libDir = filepath.Join(root, "lib")
	var compiled wazero.CompiledModule
	var err error
	if w.init.SnapshotDir != "" {
		// The snapshot's files may be root's: open them now. The image
		// stays open for the sessions to map.
		if w.snap, err = openRestorer(ctx, rt, w.init.SnapshotDir, pages); err != nil {
			return err
		}
	} else {
		wasm, err := mapModule(filepath.Join(root, "python.wasm")) // for the worker's life
		if err != nil {
			return err
		}
		if compiled, err = rt.CompileModule(trustCache(ctx), wasm); err != nil {
			return fmt.Errorf("compile python.wasm: %w", err)
		}
	}
	if _, err := instantiateWASI(ctx, rt); err != nil {
		return err
	}

	if err := dropPrivileges(w.init.DropTo, w.init.ParentPID); err != nil {
		return fmt.Errorf("drop privileges: %w", err)
	}
	if err := installSeccomp(); err != nil {
		return err
	}

	// From here on the guest runs.
	w.started = started
	return w.startSession(ctx, compiled)
}

// startSession starts a fresh interpreter — python.wasm's _start (cold) or
// an instance restored from the snapshot — with fresh stdio and scratch,
// waits until it asks for its first program, and reports ready.
func (w *worker) startSession(ctx context.Context, compiled wazero.CompiledModule) error {
	stdinR, stdinW := io.Pipe()
	w.stdinW = stdinW
	w.stdout = newBoundedWriter(w.init.StdoutBytes)
	w.stderr = &markerWriter{out: newBoundedWriter(w.init.StderrBytes)}
	ready := make(chan struct{})
	w.scratch = newScratch(w.init.ScratchBytes)
	w.exited = make(chan error, 1)
	w.sessions++
	mc := snapshotModuleConfig(guestFS(w.libDir, w.scratch)).
		WithStdin(&readyReader{r: stdinR, ready: ready}).
		WithStdout(w.stdout).
		WithStderr(w.stderr)
	if w.snap != nil {
		var st *sessionState
		minClock := int64(0)
		if w.init.Restore != nil && w.sessions == 1 {
			var err error
			if st, err = decodeState(w.init.Restore, w.snap.meta); err != nil {
				return fmt.Errorf("restore the session: %w", refused(err))
			}
			minClock = st.MonotonicNanos
		}
		mod, err := w.snap.restore(ctx, w.rt, mc, minClock)
		if err != nil {
			return err
		}
		w.mod = mod
		entry := restoreEntry
		if st != nil {
			if err := st.apply(mod, w.scratch); err != nil {
				_ = mod.Close(ctx)
				return fmt.Errorf("restore the session: %w", err)
			}
			entry = resumeEntry
		}
		// Cancelling runCtx stops the guest at its next check without
		// freeing its memory under it (wazero defers that to Close).
		runCtx, stop := context.WithCancel(ctx)
		w.stop = stop
		w.yielded, w.resume = make(chan struct{}), make(chan struct{})
		go w.guest(runCtx, mod, entry, w.exited, w.yielded, w.resume)
	} else {
		mc = mc.WithArgs("python3.13", "-u", "-c", bootstrap).
			WithEnv("PYTHONHOME", "/usr/local").
			WithSysNanotime()
		allocCtx := experimental.WithMemoryAllocator(ctx, mmapAllocator{})
		exited := w.exited
		go func() {
			_, err := w.rt.InstantiateModule(allocCtx, compiled, mc)
			exited <- err
		}()
	}
	select {
	case <-ready:
	case err := <-w.exited:
		return fmt.Errorf("interpreter exited during start-up: %v: %s", err, w.stderr.out.bytes())
	}
	if err := w.warmUp(); err != nil {
		return err
	}
	w.stderr.out.reset()
	w.stdout.reset()
	return w.send(&wire.Msg{Kind: wire.KindReady, Ready: &wire.Ready{StartupNanos: time.Since(w.started).Nanoseconds()}})
}

// guest runs a restored session's kernel (entry) in the calling
// goroutine until it ends. When it returns for a checkpoint (yielding), it
// reports that, waits until the checkpoint was taken and enters the
// kernel loop again: the state is the same, the call stack fresh.
func (w *worker) guest(ctx context.Context, mod api.Module, entry string, exited chan<- error, yielded, resume chan struct{}) {
	for {
		err := execSource(ctx, mod, entry)
		if err != nil || !w.yielding.Load() {
			exited <- err
			return
		}
		yielded <- struct{}{}
		select {
		case <-resume:
		case <-ctx.Done():
			exited <- ctx.Err()
			return
		}
		entry = resumeEntry
	}
}

// nextSession ends the current restored session and starts a fresh one
// from the snapshot in this process. The old guest gets EOF on its input
// (the kernel then exits); nothing of it survives: its memory mapping,
// stdio, scratch space and module instance all go.
func (w *worker) nextSession(ctx context.Context) error {
	if w.snap == nil {
		return errNoSnapshot
	}
	w.started = time.Now()
	// EOF ends the kernel, unless the session patched it (os._exit is
	// looked up at call time): cancelling its context ends it regardless,
	// at its next loop header or call (WithCloseOnContextDone code checks).
	// Only once it has stopped is the instance closed: Close unmaps its
	// memory, which must not happen under running guest code.
	_ = w.stdinW.Close()
	w.stop()
	select {
	case <-w.exited:
	case <-time.After(5 * time.Second):
		return errors.New("the session's interpreter did not end")
	}
	if err := w.mod.Close(ctx); err != nil {
		return fmt.Errorf("close the session's instance: %w", err)
	}
	w.mod = nil
	return w.startSession(ctx, nil)
}

// loop serves runs and file operations until the server closes the control
// pipe (or dies). File operations are answered here, in Go, on the memfs
// trees: between runs the guest is blocked reading its next program, so it
// sees them as if they happened between two of its own steps.
func (w *worker) loop(ctlIn io.Reader) error {
	for {
		msg, err := wire.Read(ctlIn)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch msg.Kind {
		case wire.KindNext:
			if err := w.nextSession(context.Background()); err != nil {
				_ = w.send(&wire.Msg{Kind: wire.KindFatal, Fatal: err.Error()})
				return err
			}
			continue
		case wire.KindPut, wire.KindGet, wire.KindList, wire.KindRemove:
			if msg.File == nil {
				return fmt.Errorf("%q message without a request", msg.Kind)
			}
			res := w.file(msg.Kind, msg.File)
			big := len(msg.File.Data)+len(res.Data) > 1<<20
			if err := w.send(&wire.Msg{Kind: wire.KindFileResult, FileResult: res}); err != nil {
				return err
			}
			if big {
				// The frame, its decoded data and the answer are garbage
				// now (memfs keeps its own copy): hand them back before the
				// guest runs again, in a cgroup sized for the guest.
				debug.FreeOSMemory()
			}
			continue
		case wire.KindCheckpoint:
			cp := w.checkpoint()
			if err := w.send(&wire.Msg{Kind: wire.KindCheckpointResult, Checkpoint: cp}); err != nil {
				return err
			}
			if w.checkpointGarbage(cp) > 1<<20 {
				// The state's copies are garbage now: handed back before
				// the guest runs again, as after a large file. Not after
				// a small one: a forced collection and scavenge cost 2–3
				// ms of CPU, as much as the checkpoint itself, for every
				// new container (docs/benchmark-notes.md, issue 41).
				debug.FreeOSMemory()
			}
			continue
		case wire.KindRun:
		default:
			return fmt.Errorf("unexpected %q message", msg.Kind)
		}
		if msg.Run == nil {
			return errors.New("run message without a program")
		}
		res := w.run(msg.Run)
		if err := w.send(&wire.Msg{Kind: wire.KindResult, Result: res}); err != nil {
			return err
		}
		if res.InterpreterGone {
			return nil
		}
	}
}

// warmUp runs cellrunner.WarmUpCells through the whole path of a run —
// stdin, the cell runner, stdout and the end marker — before the session
// is handed over, and discards their output: a restored instance faults in
// its image's pages as they are first touched, and a session's first call
// should find them touched, like its second. The guest runs them in a
// namespace it throws away (TestWarmUpLeavesNoState).
func (w *worker) warmUp() error {
	return cellrunner.WarmUp(func(cell []byte) (*wire.Result, error) {
		return w.execute(cell, warmUpTimeout, true), nil
	})
}

// warmUpTimeout bounds one warm-up cell (about a millisecond).
const warmUpTimeout = 30 * time.Second

func (w *worker) run(r *wire.Run) *wire.Result {
	res := w.execute(r.Code, time.Duration(r.TimeoutNanos), false)
	res.ID = r.ID
	return res
}

// execute runs one program (warm: one of the worker's warm-up cells).
func (w *worker) execute(code []byte, timeout time.Duration, warm bool) *wire.Result {
	nonce := newNonce()
	w.stdout.reset()
	full := w.scratch.budget.Stats().NoSpace
	done := w.stderr.expect(nonce)
	start := time.Now()
	mark := "" // bootstrap.py's header: "<nonce> <length>[ warm]"
	if warm {
		mark = " warm"
	}
	header := fmt.Sprintf("%s %d%s\n", nonce, len(code), mark)
	go func() {
		// Blocks until the guest has read it all; a guest that never reads
		// again is ended by the server's timeout (the process is killed).
		_, _ = w.stdinW.Write(append([]byte(header), code...))
	}()
	res := &wire.Result{}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case status := <-done:
		res.Status = status
	case <-timer.C:
		// The guest cannot be stopped and go on: report what it printed,
		// then this worker ends (the server kills it in any case).
		res.Status = wire.StatusTimeout
		res.InterpreterGone = true
	case err := <-w.exited:
		res.Status = wire.StatusExited
		res.InterpreterGone = true
		res.Detail = exitDetail(err)
	}
	res.DurationNanos = time.Since(start).Nanoseconds()
	res.Stdout, res.StdoutDropped = w.stdout.take()
	res.Stderr, res.StderrDropped = w.stderr.out.take()
	if w.scratch.budget.Stats().NoSpace > full {
		res.Stderr = append(res.Stderr, scratchFullNote(w.scratch.budget)...)
	}
	return res
}

func exitDetail(err error) string {
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		return fmt.Sprintf("the interpreter exited with status %d", exit.ExitCode())
	}
	if err == nil {
		return "the interpreter exited"
	}
	return "the interpreter stopped: " + err.Error()
}
