# codeinterp gVisor kernel: one long-lived process per sandbox. It reads
# framed requests (4-byte big-endian length + JSON) from /run/ci/in, runs
# each program in one persistent namespace (state survives between runs, as
# in a notebook) and answers on /run/ci/out. Program output goes to fd 1 and
# fd 2, host pipes the server bounds; after each run the kernel flushes them
# and writes b"\0CI-END:<nonce>\n" to each, then the result frame.
# Everything here is reachable by user code too: it is plumbing, not a wall.
# The walls are gVisor, the cgroup and the host's validation of every frame.
import ast, base64, builtins, io, json, linecache, os, signal, struct, sys, time, traceback

_T0 = time.monotonic()

# Top-level packages a model may want; the server lists those present in
# the tool's description. Only their presence is checked (find_spec), so the
# list may name packages this machine does not have.
_CANDIDATES = [
    "numpy", "pandas", "scipy", "matplotlib", "seaborn", "sklearn", "statsmodels", "sympy",
    "networkx", "PIL", "openpyxl", "xlrd", "pypdf", "PyPDF2", "docx", "pptx", "tabulate", "bs4",
    "lxml", "dateutil", "pytz", "tzdata", "yaml", "requests", "pyarrow", "polars", "plotly",
    "skimage", "cv2", "numba", "h5py", "tables", "xarray", "sqlalchemy", "jinja2", "markdown",
    "reportlab", "fitz", "imageio", "shapely", "geopandas", "torch", "tensorflow", "joblib",
    "tqdm", "regex", "chardet", "toolz", "mpmath", "patsy", "kiwisolver", "fontTools", "pyparsing",
]


class _Timeout(BaseException):
    pass


def _main():
    import importlib.util

    ctl_in = os.open("/run/ci/in", os.O_RDONLY)
    ctl_out = os.open("/run/ci/out", os.O_WRONLY)
    # Move the control FIFOs out of the way of the low fds user code reuses.
    fin, fout = os.dup2(ctl_in, 1000, inheritable=False), os.dup2(ctl_out, 1001, inheritable=False)
    os.close(ctl_in)
    os.close(ctl_out)
    read, write, dumps, loads = os.read, os.write, json.dumps, json.loads

    def send(msg):
        b = dumps(msg, separators=(",", ":")).encode()
        b = struct.pack(">I", len(b)) + b
        while b:
            b = b[write(fout, b):]

    def recv():
        def exact(n):
            buf = bytearray()
            while len(buf) < n:
                c = read(fin, min(n - len(buf), 1 << 20))
                if not c:
                    os._exit(0)
                buf += c
            return bytes(buf)
        (n,) = struct.unpack(">I", exact(4))
        return loads(exact(n))

    os.makedirs(os.environ.get("MPLCONFIGDIR", "/tmp/.mpl"), exist_ok=True)
    sys.stdin = io.StringIO("")  # input() gets EOF
    sys.argv = [""]
    sys.path.insert(0, "")  # modules written to /mnt/data (the cwd) import
    packages = sorted(p for p in _CANDIDATES if importlib.util.find_spec(p) is not None)

    # Pre-warm: the pool starts kernels before a session needs them, so pay
    # the heavy imports (≈2 s under gVisor) now.
    plt = None
    for name in ("numpy", "pandas", "matplotlib"):
        if name in packages:
            __import__(name)
    if "matplotlib" in packages:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        plt.show = lambda *a, **k: None  # figures stay open for the capture
    warm = compile(b"_ = 1\n_", "<warmup>", "exec", ast.PyCF_ONLY_AST)
    last = ast.Expression(warm.body.pop().value)
    ns = {"__builtins__": builtins}
    exec(compile(warm, "<warmup>", "exec"), ns)
    eval(compile(last, "<warmup>", "eval"), ns)
    del warm, last

    def on_alarm(signum, frame):
        raise _Timeout()

    def print_user_tb(e, last_line):
        # The kernel's own frames (compiled from -c, "<string>") are noise.
        te = traceback.TracebackException.from_exception(e)
        te.stack = traceback.StackSummary.from_list([f for f in te.stack if f.filename != "<string>"])
        lines = list(te.format())
        if last_line is not None:
            lines[-1] = last_line
        if len(te.stack) == 0 and lines and lines[0].startswith("Traceback"):
            lines = lines[1:]
        sys.stderr.write("".join(lines))

    def figures(max_count, max_bytes):
        p = sys.modules.get("matplotlib.pyplot")
        if p is None:
            return [], 0
        images, dropped, total = [], 0, 0
        for num in list(p.get_fignums()):
            try:
                fig = p.figure(num)
                if len(images) >= max_count:
                    dropped += 1
                    continue
                buf = io.BytesIO()
                fig.savefig(buf, format="png")
                data = buf.getvalue()
                if total + len(data) > max_bytes:
                    dropped += 1
                    continue
                total += len(data)
                images.append({"media_type": "image/png", "data": base64.b64encode(data).decode()})
            except BaseException:
                dropped += 1
            finally:
                try:
                    p.close(num)
                except BaseException:
                    pass
        return images, dropped

    def ident(fd):
        st = os.fstat(fd)
        return st.st_dev, st.st_ino

    # The host pipes the run's output must reach; code that closes or
    # replaces them leaves a kernel whose next runs would be silent.
    out_ids = [ident(1), ident(2)]
    ns = {"__name__": "__main__", "__builtins__": builtins}
    send({"kind": "ready", "ready": {"startup_ns": int((time.monotonic() - _T0) * 1e9), "packages": packages,
                                     "python": "%d.%d" % sys.version_info[:2]}})
    n = 0
    while True:
        req = recv()
        run = req["run"]
        src = base64.b64decode(run["code"])
        n += 1
        name = "<cell %d>" % n
        status, detail = "ok", ""
        signal.signal(signal.SIGALRM, on_alarm)
        try:
            try:
                signal.setitimer(signal.ITIMER_REAL, max(run["timeout_ns"], 1000) / 1e9)
                try:
                    text = src.decode("utf-8")
                    linecache.cache[name] = (len(text), None, text.splitlines(True), name)
                except UnicodeDecodeError:
                    pass
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
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _Timeout as e:
            status, detail = "timeout", "the run's time limit passed"
            print_user_tb(e, "TimeoutError: the run's time limit passed\n")
        except SystemExit as e:
            if e.code not in (None, 0):
                status = "error"
                print("SystemExit: %s" % (e.code,), file=sys.stderr)
        except BaseException as e:
            status = "memory" if isinstance(e, MemoryError) else "error"
            try:
                print_user_tb(e, None)
            except BaseException:
                try:
                    write(2, ("%s\n" % type(e).__name__).encode())
                except BaseException:
                    pass
            e = None
        images, dropped = [], 0
        if status != "timeout":
            try:
                images, dropped = figures(run["image_max_count"], run["image_max_bytes"])
            except BaseException:
                pass
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                stream.flush()
            except BaseException:
                pass
        marker = b"\0CI-END:" + run["nonce"].encode() + b"\n"
        broken = False
        for i, fd in enumerate((1, 2)):
            try:
                broken = broken or ident(fd) != out_ids[i]
                write(fd, marker)
            except BaseException:
                broken = True
        send({"kind": "result", "result": {"id": run["id"], "status": status, "detail": detail,
                                           "images": images, "images_dropped": dropped,
                                           "interpreter_gone": broken}})
        if broken:
            os._exit(0)


_main()
