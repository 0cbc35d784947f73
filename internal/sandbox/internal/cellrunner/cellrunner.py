# codeinterp cell runner: how both kernels run a program ("a cell"), the
# WASM guest's (sandbox/worker/bootstrap.py) and the gVisor sandbox's
# (sandbox/gvisor/kernel.py). It is prepended to each kernel's source, so it
# runs in the kernel's globals before any user code: what it binds here,
# code cannot replace under it. Like the kernels it is plumbing, not a wall.
#
# A cell runs in one namespace that persists between runs, as in a
# notebook; its last expression, unless it is None, is printed (repr) and
# kept as _; a traceback shows the cell's source and none of the runner's
# frames. The runner's own functions are all named _codeinterp_*: that, and
# the file name every kernel's source has ("<string>": python -c, or the
# reactor's ci_exec), is how their frames are told from the code's.
import ast, builtins, linecache, os, sys, traceback

_codeinterp_write = os.write


def _codeinterp_namespace():
    return {"__name__": "__main__", "__builtins__": builtins}


def _codeinterp_warmup():
    # Take the first-use costs (AST node types, the compile paths of a
    # cell) before a session is waiting: a throwaway cell through the same
    # steps, printing nothing.
    warm = compile(b"_ = 1\n_", "<warmup>", "exec", ast.PyCF_ONLY_AST)
    last = ast.Expression(warm.body.pop().value)
    ns = {"__builtins__": builtins}
    exec(compile(warm, "<warmup>", "exec"), ns)
    eval(compile(last, "<warmup>", "eval"), ns)


class _CodeinterpTimeout(BaseException):
    pass


# _codeinterp_timing[0] is true while a timed cell runs: the timer is not
# disarmed after a cell (a system call, ~85 µs under gVisor), so an alarm
# that comes later, between cells, is ignored (and the call it interrupted
# retried); the next cell's setitimer replaces what was left.
_codeinterp_timing = [False]


def _codeinterp_alarm(signum, frame):
    if _codeinterp_timing[0]:
        raise _CodeinterpTimeout()


def _codeinterp_cell(src, name, ns):
    try:
        text = src.decode("utf-8")
        linecache.cache[name] = (len(text), None, text.splitlines(True), name)
    except UnicodeDecodeError:
        pass
    # The commonest cell is one expression (print(x), df.head()): compiled
    # as one, from source, it is parsed and compiled once instead of three
    # times (the tree, the body, the last expression). A line that is a
    # statement fails to parse at once and takes the general path. Lines
    # with a backslash do not try: an invalid escape warns while parsing,
    # and would warn twice.
    if len(src) <= 4096 and b"\n" not in src.rstrip() and b"\\" not in src:
        try:
            code = compile(src, name, "eval")
        except SyntaxError:
            pass
        else:
            value = eval(code, ns)
            if value is not None:
                ns["_"] = value
                print(repr(value))
            return
    tree = compile(src, name, "exec", ast.PyCF_ONLY_AST)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, name, "exec"), ns)
    if last is not None:
        value = eval(compile(last, name, "eval"), ns)
        if value is not None:
            ns["_"] = value
            print(repr(value))


def _codeinterp_traceback(e, last_line=None):
    # e's traceback on stderr, without the runner's frames; last_line, when
    # given, replaces the exception's own line.
    te = traceback.TracebackException.from_exception(e)
    te.stack = traceback.StackSummary.from_list(
        [f for f in te.stack if f.filename != "<string>" or not f.name.startswith("_codeinterp_")])
    lines = list(te.format())
    if last_line is not None:
        lines[-1] = last_line
    if len(te.stack) == 0 and lines and lines[0].startswith("Traceback"):
        lines = lines[1:]
    sys.stderr.write("".join(lines))


def _codeinterp_run(src, name, ns, timeout=None):
    """Runs cell src (bytes), named name in tracebacks, in namespace ns, and
    returns its status: "ok" (it ran to the end, or sys.exit(0)), "error",
    "memory" (MemoryError escaped) or "timeout". With timeout (seconds), a
    SIGALRM timer ends the cell after that long with a traceback (POSIX
    only: the gVisor kernel; the WASM worker times runs from outside)."""
    if timeout is not None:
        import signal
        # Installed once, and again only if the code replaced it: each
        # signal() is a system call, which under gVisor is not cheap.
        if signal.getsignal(signal.SIGALRM) is not _codeinterp_alarm:
            signal.signal(signal.SIGALRM, _codeinterp_alarm)
    try:
        try:
            if timeout is not None:
                _codeinterp_timing[0] = True
                signal.setitimer(signal.ITIMER_REAL, timeout)
            _codeinterp_cell(src, name, ns)
        finally:
            _codeinterp_timing[0] = False
    except _CodeinterpTimeout as e:
        _codeinterp_traceback(e, "TimeoutError: the run's time limit passed\n")
        return "timeout"
    except SystemExit as e:
        if e.code in (None, 0):
            return "ok"
        print("SystemExit: %s" % (e.code,), file=sys.stderr)
        return "error"
    except BaseException as e:
        try:
            _codeinterp_traceback(e)
        except BaseException:
            try:
                _codeinterp_write(2, ("%s\n" % type(e).__name__).encode())
            except BaseException:
                pass
        return "memory" if isinstance(e, MemoryError) else "error"
    return "ok"


def _codeinterp_flush():
    # What the cell wrote to Python's buffers goes out before the kernel
    # marks the run's end, even through streams the code replaced.
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except BaseException:
            pass
