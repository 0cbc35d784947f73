# codeinterp gVisor kernel: one long-lived process per sandbox. It reads
# framed requests (4-byte big-endian length + JSON) from /run/ci/in, runs
# each program with the cell runner (sandbox/internal/cellrunner, prepended
# to this file) in one persistent namespace (state survives between runs, as
# in a notebook) and answers on /run/ci/out. Program output goes to fd 1 and
# fd 2, host pipes the server bounds; after each run the kernel flushes them
# and writes b"\0CI-END:<nonce>\n" to each, then the result frame.
# Everything here is reachable by user code too: it is plumbing, not a wall.
# The walls are gVisor, the cgroup and the host's validation of every frame.
import base64, errno, io, json, os, stat, struct, sys, time

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


def reseed():
    """Give this sandbox its own randomness before user code runs.

    Sessions restored from one checkpoint start from the same memory, so
    every generator seeded before the checkpoint would repeat across them;
    gVisor's getrandom is fresh in each restored sandbox, so seeding from
    os.urandom separates them. (The str hash seed is fixed when the
    interpreter starts: all sessions of one image share it.)"""
    import random
    random.seed()  # os.urandom
    for name, mod in list(sys.modules.items()):
        if name == "numpy.random" and hasattr(mod, "seed"):
            mod.seed()  # the legacy global RandomState; default_rng() draws from the OS each call
        elif name == "tempfile":
            mod._name_sequence = None  # its name generator, made on first use
        elif name == "multiprocessing" and hasattr(mod, "current_process"):
            mod.current_process().authkey = os.urandom(32)


def fonts_in_memory():
    """Serve matplotlib's fonts from memory.

    FreeType reads a font through matplotlib's file callback: a seek and a
    read on the open file for every glyph it loads, about 870 system calls
    for one small chart. Natively they cost nothing; under gVisor each is a
    trap into the sentry (tens of microseconds), which made a pandas groupby
    plus a PNG chart 6x slower than native, half of it in FT2Font.set_text.
    The fonts live in the sandbox's read-only root, so each file is read
    once into memory and FreeType reads from that copy. fname stays the
    path: the PDF and PS backends use it to embed the font file."""
    from functools import lru_cache
    from matplotlib import font_manager, ft2font

    class MemoryFont(ft2font.FT2Font):
        def __init__(self, path, *args, **kwargs):
            with open(path, "rb") as f:
                data = io.BytesIO(f.read())
            super().__init__(data, *args, **kwargs)
            self._codeinterp_path = os.fspath(path)

        @property
        def fname(self):
            return self._codeinterp_path

    @lru_cache(64)
    def _get_font(font_filepaths, hinting_factor, *, _kerning_factor, thread_id):
        first, *rest = font_filepaths
        return MemoryFont(first, hinting_factor, _kerning_factor=_kerning_factor, _fallback_list=[
            MemoryFont(p, hinting_factor, _kerning_factor=_kerning_factor) for p in rest])

    original = font_manager._get_font
    if not hasattr(original, "cache_info"):
        return  # not matplotlib 3.6's (bookworm's) cached loader: keep its own
    font_manager._get_font = _get_font
    try:
        # The default font, loaded before the checkpoint; a loader this
        # matplotlib does not take is undone.
        font_manager.get_font(font_manager.findfont(font_manager.FontProperties()))
    except Exception:
        font_manager._get_font = original


def _main():
    import importlib.util

    ctl_in = os.open("/run/ci/in", os.O_RDONLY)
    ctl_out = os.open("/run/ci/out", os.O_WRONLY)
    # Move the control FIFOs out of the way of the low fds user code reuses.
    fin, fout = os.dup2(ctl_in, 1000, inheritable=False), os.dup2(ctl_out, 1001, inheritable=False)
    os.close(ctl_in)
    os.close(ctl_out)
    read, write, dumps, loads = os.read, os.write, json.dumps, json.loads

    def write_all(b):
        # A memoryview: slicing bytes would copy a file-sized frame per write.
        b = memoryview(b)
        while b:
            b = b[write(fout, b):]

    def send(msg, data=None):
        b = dumps(msg, separators=(",", ":")).encode()
        if data is None:
            write_all(struct.pack(">I", len(b)) + b)
            return
        # A file's bytes go last, as base64 spliced in before the two braces
        # that close the frame, so that they are never held as JSON text too
        # (the file_result object always has an id before them).
        head, tail = b[:-2] + b',"data":"', b'"}}'
        data = b64e(data)
        write_all(struct.pack(">I", len(head) + len(data) + len(tail)) + head)
        write_all(data)
        write_all(tail)

    # The host writes a small frame in one write and the next frame only
    # after this one's answer: reading ahead (at least 64 KiB a read) takes
    # a run's frame in one system call instead of two, keeping whatever
    # follows what was asked for.
    pending = bytearray()
    # Work for a quiet moment (the hosted shell's next login bash and
    # what its last call left to close, shell below): done once no request has come for QUIET seconds, so that it
    # does not compete for the sandbox's CPU with the requests that follow
    # an answer (the host lists /mnt/data after every call).
    quiet_work, QUIET = [], 0.05

    def when_quiet():
        try:
            busy = _select([fin], [], [], QUIET)[0]
        except (OSError, ValueError):
            busy = True
        if not busy:
            work = quiet_work[:]
            del quiet_work[:]
            for w in work:
                w()

    def exact(n):
        nonlocal pending
        while len(pending) < n:
            if quiet_work and not pending:
                when_quiet()
            c = read(fin, min(max(n - len(pending), 1 << 16), 1 << 20))
            if not c:
                os._exit(0)
            pending += c
        if len(pending) == n:
            out, pending = pending, bytearray()  # no copy of a file-sized frame
        else:
            out = pending[:n]
            del pending[:n]
        return out  # json.loads takes a bytearray

    def recv():
        (n,) = struct.unpack(">I", exact(4))
        return loads(exact(n))

    os.makedirs(os.environ.get("MPLCONFIGDIR", "/tmp/.mpl"), exist_ok=True)
    sys.stdin = io.StringIO("")  # input() gets EOF
    # python -u writes each print() piece as it comes (print(25) is two
    # writes, each a system call at ~85 µs under gVisor's ptrace): buffer
    # up to a newline instead, so a line is one write and what the code
    # printed stays in the host's pipes up to its last full line even when
    # the sandbox is killed mid-run. The cell runner flushes the rest.
    for _s in (sys.stdout, sys.stderr):
        _s.reconfigure(line_buffering=True, write_through=False)
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
        fonts_in_memory()
    _codeinterp_warmup()
    import resource  # for begin: an import after a restore reads files through the gofer
    import fcntl, select, signal, subprocess, threading  # for the hosted shell, imported before any checkpoint

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

    # File operations on the scratch space, between runs. They work from
    # descriptors and never follow a symbolic link, so a link the code made
    # cannot send them elsewhere. The functions are bound now, before any
    # user code can replace them in the os module.
    _open, _close, _fstat, _stat, _mkdir, _rmdir, _replace, _unlink = (
        os.open, os.close, os.fstat, os.stat, os.mkdir, os.rmdir, os.replace, os.unlink)
    _chmod, _fchmod = os.chmod, os.fchmod
    _scandir, _umask, _urandom, b64e, b64d = os.scandir, os.umask, os.urandom, base64.b64encode, base64.b64decode
    S_ISREG, S_ISDIR, S_ISLNK = stat.S_ISREG, stat.S_ISDIR, stat.S_ISLNK
    O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    ROOTS = ("/mnt/data", "/tmp")

    class Refusal(Exception):
        def __init__(self, code, detail):
            self.code, self.detail = code, detail

    def os_code(e, default):
        n = e.errno
        if n in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            return "no_space"
        if n in (errno.ENOTDIR, errno.ELOOP, errno.EISDIR, errno.EEXIST, errno.ENAMETOOLONG, errno.ENOTEMPTY):
            return "invalid"
        if n in (errno.EMFILE, errno.ENFILE):
            return "too_large"
        return default

    def split(path):
        # The host sent a clean absolute path under a root.
        for root in ROOTS:
            if path == root:
                return root, []
            if path.startswith(root + "/"):
                return root, path[len(root) + 1:].split("/")
        raise Refusal("invalid", "not under /mnt/data or /tmp")

    def open_dir_at(fd, name):
        # O_NOFOLLOW alone does not do: gVisor follows a final link when
        # O_DIRECTORY is given too (Linux says ELOOP). So the name must be a
        # directory by lstat, and the opened one the same inode.
        st = _stat(name, dir_fd=fd, follow_symlinks=False)
        if not S_ISDIR(st.st_mode):
            raise OSError(errno.ELOOP if S_ISLNK(st.st_mode) else errno.ENOTDIR, "not a directory", name)
        nfd = _open(name, O_DIR, dir_fd=fd)
        nst = _fstat(nfd)
        if (nst.st_dev, nst.st_ino) != (st.st_dev, st.st_ino):
            _close(nfd)
            raise OSError(errno.ELOOP, "replaced while opened", name)
        return nfd

    def open_dirs(root, names, made=None):
        # Opens root/names... as directories, each without following a
        # link. With made (a put), it makes way: a missing directory is
        # made, and what is there but is not one (a file, a link, a FIFO) is
        # unlinked and a directory made in its place; each made is recorded.
        fd = _open(root, O_DIR)
        try:
            for i, name in enumerate(names):
                try:
                    nfd = open_dir_at(fd, name)
                except OSError as e:
                    if made is None or e.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                        raise
                    if e.errno != errno.ENOENT:
                        _unlink(name, dir_fd=fd)
                    _mkdir(name, 0o755, dir_fd=fd)
                    made.append(root + "/" + "/".join(names[:i + 1]))
                    nfd = open_dir_at(fd, name)
                _close(fd)
                fd = nfd
        except BaseException:
            _close(fd)
            raise
        return fd

    def dev_ino(fd):
        st = _fstat(fd)
        return st.st_dev, st.st_ino

    def open_for_removal(fd, name):
        # Opens directory name of fd, about to be emptied, and makes it
        # readable, writable and searchable: the kernel runs as the code's
        # user, so a mode the code set is all that could stand in the way.
        try:
            nfd = open_dir_at(fd, name)
        except PermissionError:
            # Not readable. chmod by name follows a final link, but lstat
            # has just seen a directory there and the code is idle between
            # runs; at worst a thread it left running swaps in a link to a
            # file of the same user, whose mode then changes.
            _chmod(name, 0o700, dir_fd=fd)
            nfd = open_dir_at(fd, name)
        try:
            _fchmod(nfd, 0o700)
        except BaseException:
            _close(nfd)
            raise
        return nfd

    def clear(fd):
        # Unlinks every entry of directory fd but its subdirectories (links,
        # FIFOs and the like included: unlink never follows), and returns the
        # subdirectories' names.
        others, subdirs = [], []
        with _scandir(fd) as it:
            for e in it:
                (subdirs if e.is_dir(follow_symlinks=False) else others).append(e.name)
        for name in others:
            try:
                _unlink(name, dir_fd=fd)
            except FileNotFoundError:
                pass
        return subdirs

    def remove_tree(pfd, name):
        # Removes directory name of pfd and everything below it, depth first,
        # from descriptors only, holding at most three whatever the depth: it
        # climbs back up by "..", which must be the directory it came down
        # from. One entry per level: [name, (dev, ino), subdirectories left].
        fd = open_for_removal(pfd, name)
        try:
            stack = [[name, dev_ino(fd), clear(fd)]]
            while True:
                level = stack[-1]
                if level[2]:
                    sub = level[2].pop()
                    try:
                        cfd = open_for_removal(fd, sub)
                    except FileNotFoundError:
                        continue
                    except OSError as e:
                        if e.errno not in (errno.ENOTDIR, errno.ELOOP):
                            raise
                        _unlink(sub, dir_fd=fd)  # no longer a directory
                        continue
                    _close(fd)
                    fd = cfd
                    stack.append([sub, dev_ino(fd), None])
                    stack[-1][2] = clear(fd)
                    continue
                stack.pop()
                if not stack:
                    break
                up = open_dir_at(fd, "..")
                _close(fd)
                fd = up
                if dev_ino(fd) != stack[-1][1]:
                    raise OSError(errno.EIO, "a directory moved while it was removed")
                _rmdir(level[0], dir_fd=fd)
        finally:
            _close(fd)
        _rmdir(name, dir_fd=pfd)

    def remove(paths):
        split_paths = [split(p) for p in paths]
        if any(not names for _, names in split_paths):
            raise Refusal("invalid", "a root cannot be removed")
        # Consecutive paths in one directory share its descriptor.
        last, dfd = None, None
        try:
            for root, names in split_paths:
                key = (root, names[:-1])
                if key != last:
                    if dfd is not None:
                        _close(dfd)
                        dfd = None
                    last = key
                    try:
                        dfd = open_dirs(root, names[:-1])
                    except OSError as e:
                        # A parent missing, a link or not a directory:
                        # nothing is at the path.
                        if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.ENAMETOOLONG):
                            continue
                        raise
                if dfd is None:
                    continue  # below the same missing parent as the last one
                name = names[-1]
                try:
                    st = _stat(name, dir_fd=dfd, follow_symlinks=False)
                except OSError as e:
                    if e.errno in (errno.ENOENT, errno.ENAMETOOLONG):
                        continue
                    raise
                if S_ISDIR(st.st_mode):
                    remove_tree(dfd, name)
                else:
                    try:
                        _unlink(name, dir_fd=dfd)
                    except FileNotFoundError:
                        pass
        except OSError as e:
            raise Refusal("io", "%s: %s" % (type(e).__name__, e.strerror))
        finally:
            if dfd is not None:
                _close(dfd)
        return {}

    def put(path, data):
        root, names = split(path)
        if not names:
            raise Refusal("invalid", "is a directory")
        made, tmp, dfd = [], None, None
        old = _umask(0o022)  # the code may have set another
        try:
            dfd = open_dirs(root, names[:-1], made)
            # What is at the name and is not a regular file goes first (a
            # regular file is replaced by the rename, so a write that fails
            # keeps it).
            try:
                st = _stat(names[-1], dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            if st is not None and S_ISDIR(st.st_mode):
                remove_tree(dfd, names[-1])
            elif st is not None and not S_ISREG(st.st_mode):
                _unlink(names[-1], dir_fd=dfd)
            tmp = ".ci-put-" + _urandom(8).hex()
            wfd = _open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dfd)
            try:
                mv = memoryview(data)
                while mv:
                    mv = mv[write(wfd, mv):]
            finally:
                _close(wfd)
            _replace(tmp, names[-1], src_dir_fd=dfd, dst_dir_fd=dfd)
            tmp = None
        except BaseException as e:
            # Nothing half-written stays: the temporary file, then the
            # directories made for it, deepest first.
            if tmp is not None and dfd is not None:
                try:
                    _unlink(tmp, dir_fd=dfd)
                except OSError:
                    pass
            for d in reversed(made):
                try:
                    _rmdir(d)
                except OSError:
                    pass
            if isinstance(e, OSError):
                raise Refusal(os_code(e, "io"), "%s: %s" % (type(e).__name__, e.strerror))
            raise
        finally:
            _umask(old)
            if dfd is not None:
                _close(dfd)
        return {}

    def get(path, limit):
        root, names = split(path)
        try:
            dfd = open_dirs(root, names[:-1])
        except (FileNotFoundError, NotADirectoryError):
            raise Refusal("not_exist", "no such file")
        except OSError as e:
            raise Refusal("not_regular" if e.errno == errno.ELOOP else os_code(e, "io"), e.strerror)
        try:
            try:
                fd = _open(names[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
            except FileNotFoundError:
                raise Refusal("not_exist", "no such file")
            except OSError as e:
                raise Refusal("not_regular" if e.errno == errno.ELOOP else os_code(e, "io"), e.strerror)
        finally:
            _close(dfd)
        try:
            st = _fstat(fd)
            if not S_ISREG(st.st_mode):
                raise Refusal("not_regular", stat.filemode(st.st_mode))
            if st.st_size > limit:
                return {"error": "too_large", "detail": "file too large", "size": st.st_size}
            buf = bytearray()
            while len(buf) <= limit:
                c = read(fd, min(limit + 1 - len(buf), 1 << 20))
                if not c:
                    break
                buf += c
            if len(buf) > limit:  # it grew (a thread the code left running)
                return {"error": "too_large", "detail": "file too large", "size": len(buf)}
        finally:
            _close(fd)
        return {"size": len(buf), "data": buf}

    def listing(path, limit, max_path, max_total):
        root, names = split(path)
        try:
            top = open_dirs(root, names)
        except FileNotFoundError:
            raise Refusal("not_exist", "no such directory")
        except OSError as e:
            raise Refusal(os_code(e, "io"), e.strerror)
        files, total = [], 0
        # Depth first, holding one descriptor per level: (descriptor, its
        # path, the subdirectories still to visit).
        stack = []

        class Full(Exception):
            pass

        def enter(fd, dpath):
            nonlocal total
            try:
                subdirs = []
                with _scandir(fd) as it:
                    for e in it:
                        p = dpath + "/" + e.name
                        try:
                            nb = len(p.encode())
                        except UnicodeEncodeError:
                            continue  # not UTF-8: JSON cannot name it
                        if nb > max_path:
                            continue
                        if e.is_dir(follow_symlinks=False):
                            subdirs.append((e.name, p))
                        elif e.is_file(follow_symlinks=False):
                            if len(files) >= limit or total + nb > max_total:
                                raise Full()
                            st = e.stat(follow_symlinks=False)
                            total += nb
                            files.append({"path": p, "size": st.st_size, "mtime_ns": st.st_mtime_ns})
            except BaseException:
                _close(fd)
                raise
            subdirs.reverse()
            stack.append((fd, dpath, subdirs))

        truncated = False
        try:
            enter(top, path)
            while stack:
                fd, dpath, subdirs = stack[-1]
                if not subdirs:
                    stack.pop()
                    _close(fd)
                    continue
                name, p = subdirs.pop()
                try:
                    cfd = open_dir_at(fd, name)
                except OSError as e:
                    if e.errno in (errno.EMFILE, errno.ENFILE):
                        raise
                    continue  # gone, replaced by a link, or unreadable
                enter(cfd, p)
        except Full:
            # More than one listing carries: these are some of them.
            truncated = True
        except OSError as e:
            raise Refusal(os_code(e, "io"), e.strerror)
        finally:
            for fd, _, _ in stack:
                _close(fd)
        if truncated:
            return {"files": files, "truncated": True}
        return {"files": files}

    def file_op(kind, req):
        try:
            if kind == "put":
                out = put(req["path"], b64d(req.get("data") or ""))
            elif kind == "get":
                out = get(req["path"], req.get("max", 0))
            elif kind == "remove":
                out = remove(req.get("paths") or [])
            else:
                out = listing(req["path"], req.get("max", 0), req.get("max_path", 0), req.get("max_path_total", 0))
        except Refusal as r:
            out = {"error": r.code, "detail": str(r.detail)[:200]}
        except OSError as e:
            out = {"error": "io", "detail": ("%s: %s" % (type(e).__name__, e.strerror))[:200]}
        except Exception as e:  # a kernel bug must not end the session's kernel
            out = {"error": "io", "detail": type(e).__name__}
        out["id"] = req["id"]
        return out

    # The hosted shell (sandbox.Sheller): each command as by `bash -lc`, one
    # after another, cwd /mnt/data, stdin /dev/null (no TTY), in a process
    # group of its own. Its stdout and stderr are pipes read here, each
    # kept up to the host's bound (the rest counted as dropped) and sent as
    # shell_output frames as they come. A command ends when bash exits:
    # what it left in the background may keep running (a service), and
    # once the pipes are quiet for a moment after the exit they are closed,
    # so a process holding them open does not hold the call. Past its
    # timeout a command's process group is killed. (Answering before bash's
    # exit, ≈1.6 ms under gVisor, on a status its EXIT trap writes, was
    # measured: 0.3 ms saved, as the trap costs most of what it saves, and
    # wrong for a signal bash catches — bash 5.2 runs the EXIT trap with
    # the last command's status, then dies of the signal: 128+n.)
    _popen, _killpg, _waitpid, _select, _read_fd = subprocess.Popen, os.killpg, os.waitpid, select.select, os.read
    DRAIN = 0.05  # seconds of quiet pipes after bash exited
    SPAWN = dict(cwd="/mnt/data", stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                 start_new_session=True, close_fds=True)

    def reap():
        # The kernel is the sandbox's first process: orphans of the
        # commands (a background job whose bash exited) are its children
        # once they end.
        while True:
            try:
                pid, _ = _waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            except OSError:
                return
            if pid == 0:
                return

    groups = []  # process groups of earlier commands (their background jobs)
    later = []  # fds and files a call leaves to close after its answer (tidy)

    def kill_groups(pgids):
        # Repeated: a fork bomb forks while it is being killed.
        for _ in range(20):
            alive = False
            for g in pgids:
                try:
                    _killpg(g, signal.SIGKILL)
                    alive = True
                except OSError:
                    pass
            reap()
            if not alive:
                return
            time.sleep(0.01)

    # The spare: a login bash started ahead of the next command, off the
    # call's path (a new process and bash's login profile cost 30–60 ms
    # under gVisor, a Python cell 2 ms): once the host has been quiet for
    # QUIET after a call (started at once, it made the listing of
    # /mnt/data the host sends after each call 3x slower), and during a
    # command for the call's next one. It is spawned as `bash -lc` is
    # (cwd, its own session and process group, stdin /dev/null, the pipes),
    # reads the login profile, then waits on a pipe for the word to go;
    # the command is handed over in an unlinked file (bash reads a pipe a
    # byte per system call, a file in blocks) and run by eval with
    # BASH_EXECUTION_STRING set as -c sets it, so the command sees what
    # `bash -lc` shows it: its exit status is bash's, `exit` ends it, the
    # login profile's output comes first. A syntax error's message names
    # "eval" where bash -c names "-c". A spare is used only while what its
    # profile read is unchanged — the kernel's environment and umask, and
    # the login files in $HOME (checked by stat) — and never for a command
    # holding a NUL, nor once it has written to stderr (its profile failed,
    # e.g. a fork refused while the pids limit was full: `bash -lc` now may
    # well not); otherwise it is killed and the command spawned afresh.
    # A checkpoint keeps it like any process (runsc saves the pipes and
    # the unlinked file with the sandbox).
    SPARE_BOOT = ("IFS= read -r -u %(go)d __ci || exit 0; exec %(go)d<&-; "
                  "mapfile -d '' -u %(cmd)d __ci; exec %(cmd)d<&-; "
                  'BASH_EXECUTION_STRING=${__ci[0]}; unset __ci; eval "$BASH_EXECUTION_STRING"')
    spare = [None, None]  # (Popen, command fd, go fd, login signature, pidfd); the thread starting it

    def login_signature():
        home = os.environ.get("HOME") or "/"
        files = []
        for name in (".bash_profile", ".bash_login", ".profile", ".bashrc"):
            try:
                st = os.stat(os.path.join(home, name))
                files.append((st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size))
            except OSError:
                files.append(None)
        mask = os.umask(0o022)
        os.umask(mask)
        return dict(os.environ), mask, files

    def close_fds(*fds):
        for fd in fds:
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass

    def start_spare():
        sig = login_signature()
        fd = cmd_fd = r = go_r = go_w = None
        try:
            path = "/tmp/.codeinterp-shell-" + os.urandom(8).hex()
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            os.unlink(path)
            r, go_w = os.pipe()
            # Numbers above what a login profile is likely to use.
            cmd_fd = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 100)
            go_r = fcntl.fcntl(r, fcntl.F_DUPFD_CLOEXEC, 100)
            p = _popen(["/bin/bash", "-lc", SPARE_BOOT % {"go": go_r, "cmd": cmd_fd}], pass_fds=(cmd_fd, go_r),
                       **SPAWN)
        except (OSError, ValueError):
            close_fds(fd, cmd_fd, r, go_r, go_w)
            return
        close_fds(fd, r, go_r)
        spare[0] = (p, cmd_fd, go_w, sig, open_pidfd(p))

    def spare_later():
        # Off the call's path: the fork and exec run in a thread while the
        # kernel answers and reads its next request. One spare at most.
        drop_spare()
        t = threading.Thread(target=start_spare, name="codeinterp-shell-spare", daemon=True)
        try:
            t.start()
        except RuntimeError:  # no thread to be had (RLIMIT_NPROC)
            return
        spare[1] = t

    def settle_spare():
        t, spare[1] = spare[1], None
        if t is not None:
            t.join()

    def drop_spare():
        settle_spare()
        s, spare[0] = spare[0], None
        if s is None:
            return
        p, cmd_fd, go_w, _, pidfd = s
        close_fds(cmd_fd, go_w, pidfd)
        kill_groups([p.pid])
        p.stdout.close()
        p.stderr.close()

    def take_spare(cmd):
        settle_spare()
        s = spare[0]
        if s is None or "\0" in cmd:
            drop_spare()
            return None
        p, cmd_fd, go_w, sig, pidfd = s
        try:
            # One look at its pidfd (has it exited?) and its stderr (did
            # its profile fail? a fork refused while earlier commands' left
            # processes filled the pids limit, which bash retries for
            # seconds): either way it is not used.
            if pidfd is None and p.poll() is not None:
                raise OSError()
            watch = [p.stderr] if pidfd is None else [p.stderr, pidfd]
            if _select(watch, [], [], 0)[0] or login_signature() != sig:
                raise OSError()
            data, at = os.fsencode(cmd), 0
            while at < len(data):
                at += os.pwrite(cmd_fd, data[at:], at)
            os.write(go_w, b"\n")
        except (OSError, ValueError):
            drop_spare()
            return None
        spare[0] = None
        later.extend((cmd_fd, go_w))
        return p, pidfd

    def open_pidfd(p):
        # bash's exit wakes the kernel's select through a pidfd: no
        # polling between its pipes' end and its exit.
        try:
            return os.pidfd_open(p.pid)
        except (AttributeError, OSError):
            return None

    def spawn(cmd):
        # bash and its pidfd (None where there is none).
        s = take_spare(cmd)
        if s is not None:
            return s
        try:
            p = _popen(["/bin/bash", "-lc", cmd], **SPAWN)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.ENOMEM) or not groups:
                raise
            # No process to be had (RLIMIT_NPROC, memory): what earlier
            # commands left running is killed to make room, and the
            # command tried once more.
            kill_groups(groups)
            del groups[:]
            p = _popen(["/bin/bash", "-lc", cmd], **SPAWN)
        return p, open_pidfd(p)

    def tidy():
        # What a call leaves to close, done after its answer (each system
        # call is a trip to the sentry): the spare's command file and go
        # pipe, the pidfds, pipes that ended.
        for f in later:
            if isinstance(f, int):
                close_fds(f)
            else:
                f.close()
        del later[:]

    def shell(req):
        rid, limits = req["id"], (req["stdout_max"], req["stderr_max"])
        timeout = max(req["timeout_ns"], 1000) / 1e9
        results = []
        commands = req["commands"]
        tidy()  # what the last call left, when no quiet moment came since
        for ci, cmd in enumerate(commands):
            last = ci + 1 == len(commands)
            try:
                p, pidfd = spawn(cmd)
            except OSError as e:
                results.append({"stdout": "", "stderr": b64e(("bash did not start: %s\n" % e.strerror).encode()).decode(),
                                "exit_code": 126})
                continue
            if not last:
                spare_later()  # the next command's bash starts while this one runs
            fds = [p.stdout.fileno(), p.stderr.fileno()]
            bufs, dropped = [bytearray(), bytearray()], [0, 0]
            open_fds = set(fds)
            deadline = time.monotonic() + timeout
            exited, timed_out, quiet_since, may_exit, nap = None, False, None, True, 0.0002
            while True:
                now = time.monotonic()
                if exited is None and may_exit:
                    exited = p.poll()
                    may_exit = pidfd is None
                if exited is not None:
                    if not open_fds:
                        break
                    if quiet_since is not None and now - quiet_since >= DRAIN:
                        break
                elif now >= deadline:
                    kill_groups([p.pid])
                    timed_out = True
                    p.wait()
                    break
                wait = DRAIN if exited is not None else min(0.2, max(deadline - now, 0))
                watch = list(open_fds)
                if exited is None and pidfd is not None:
                    watch.append(pidfd)
                if not watch:
                    # Both pipes closed, bash not yet reaped and no pidfd:
                    # it is exiting (or closed them and runs on).
                    time.sleep(min(wait, nap))
                    nap = min(nap * 2, 0.01)
                    continue
                try:
                    ready, _, _ = _select(watch, [], [], wait)
                except InterruptedError:
                    continue
                if pidfd in ready:
                    ready.remove(pidfd)
                    may_exit = True
                    continue
                if not ready:
                    if exited is not None and quiet_since is None:
                        quiet_since = now
                    continue
                quiet_since = None
                for fd in ready:
                    k = fds.index(fd)
                    try:
                        b = _read_fd(fd, 65536)
                    except OSError:
                        b = b""
                    if not b:
                        open_fds.discard(fd)
                        continue
                    room = limits[k] - len(bufs[k])
                    piece = b[:max(room, 0)]
                    dropped[k] += len(b) - len(piece)
                    if piece:
                        bufs[k] += piece
                        delta = {"id": rid, "command": ci}
                        delta["stdout" if k == 0 else "stderr"] = b64e(piece).decode()
                        send({"kind": "shell_output", "shell_output": delta})
            if pidfd is not None:
                later.append(pidfd)
            if open_fds or not last:
                # Pipes a process still holds are closed now, as the
                # call ends (the writer gets EPIPE), as are a command's
                # before the next one starts.
                p.stdout.close()
                p.stderr.close()
            else:
                later.extend((p.stdout, p.stderr))
            res = {"stdout": b64e(bytes(bufs[0])).decode(), "stderr": b64e(bytes(bufs[1])).decode(),
                   "stdout_dropped": dropped[0], "stderr_dropped": dropped[1]}
            if timed_out:
                res["timed_out"] = True
                res["exit_code"] = -1
            else:
                rc = p.returncode
                res["exit_code"] = 128 - rc if rc < 0 else rc
            results.append(res)
            if not timed_out and p.pid not in groups:
                groups.append(p.pid)
                del groups[:-64]
            # Orphans are reaped now, not later: reaping frees pids, and a
            # pid freed just before the next command's bash starts, while a
            # fork bomb an earlier command left fills the limit, gives that
            # bash a pid but not its profile's fork, which it retries for
            # seconds (spawn kills the earlier commands' groups only when
            # bash itself gets no pid).
            reap()
        return {"id": rid, "commands": results}

    def start_net(net):
        # The session's way out (network.go): a relay on loopback that pipes
        # each connection to the egress proxy's unix socket, the proxy
        # variables, CA bundle and secret placeholders in the environment,
        # and the user's site (where pip installs: the root is read-only) on
        # sys.path. Before any user code; killing the relay only cuts the
        # code off, the proxy enforces everything.
        import site
        import socket
        import threading
        path = net["socket"]
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", net["port"]))
        srv.listen(64)

        def pipe(src, dst):
            try:
                while True:
                    b = src.recv(65536)
                    if not b:
                        break
                    dst.sendall(b)
            except OSError:
                pass
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

        def relay(c):
            u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                u.connect(path)
            except OSError:
                u.close()
                c.close()
                return
            t = threading.Thread(target=pipe, args=(u, c), daemon=True)
            t.start()
            pipe(c, u)
            t.join()
            c.close()
            u.close()

        def accept():
            while True:
                try:
                    c, _ = srv.accept()
                except OSError:
                    return
                try:
                    threading.Thread(target=relay, args=(c,), daemon=True).start()
                except RuntimeError:  # no thread to be had (RLIMIT_NPROC)
                    c.close()

        threading.Thread(target=accept, name="codeinterp-egress-relay", daemon=True).start()
        os.environ.update(net.get("env") or {})
        user_site = site.getusersitepackages()
        os.makedirs(user_site, exist_ok=True)
        if user_site not in sys.path:
            sys.path.append(user_site)

    ready = {"kind": "ready", "ready": {"startup_ns": int((time.monotonic() - _T0) * 1e9), "packages": packages,
                                        "python": "%d.%d" % sys.version_info[:2]}}
    send(ready)
    # Here the server may checkpoint the sandbox (runsc checkpoint): every
    # session restored from the image resumes in this recv, with new host
    # pipes and FIFOs, the image's memory and fresh kernel randomness. The
    # begin frame comes before any user code, cold or restored.
    begin = recv()
    if begin.get("kind") != "begin":
        os._exit(3)
    begin = begin["begin"]
    reseed()
    if begin.get("address_space", 0) > 0:
        # Lowering a limit needs no privilege, and the code cannot raise
        # the hard limit again.
        resource.setrlimit(resource.RLIMIT_AS, (begin["address_space"], begin["address_space"]))
    if begin.get("net"):
        start_net(begin["net"])
    ns = _codeinterp_namespace()
    ready["ready"]["startup_ns"] = int((time.monotonic() - _T0) * 1e9)
    send(ready)
    n = 0
    while True:
        req = recv()
        kind = req.get("kind")
        if kind in ("put", "get", "list", "remove"):
            out = file_op(kind, req["file"])
            data = out.pop("data", None)
            send({"kind": "file_result", "file_result": out}, data)
            continue
        if kind == "shell":
            try:
                out = shell(req["shell"])
            except Exception as e:  # a kernel bug must not end the session's kernel
                out = {"id": req["shell"]["id"], "commands": [], "error": type(e).__name__}
            send({"kind": "shell_result", "shell_result": out})
            # The rest, and the next call's bash, once the host is done with
            # this one.
            quiet_work[:] = [tidy, spare_later]
            continue
        run = req["run"]
        src = base64.b64decode(run["code"])
        timeout = max(run["timeout_ns"], 1000) / 1e9
        if run.get("warm"):
            # The host's own warm-up (interp.warmUp), before the session is
            # handed over: the whole path of a run, in a namespace thrown
            # away, not counted as a cell.
            status = _codeinterp_run(src, "<warmup>", _codeinterp_namespace(), timeout)
        else:
            n += 1
            status = _codeinterp_run(src, "<cell %d>" % n, ns, timeout)
        detail = "the run's time limit passed" if status == "timeout" else ""
        images, dropped = [], 0
        if status != "timeout":
            try:
                images, dropped = figures(run["image_max_count"], run["image_max_bytes"])
            except BaseException:
                pass
        _codeinterp_flush()
        # The end markers go to whatever fds 1 and 2 are now: when code
        # closed or replaced them, a marker does not reach the host, which
        # then ends this kernel (interp.run). Checking them here would be
        # two system calls a run, each ~85 µs under gVisor's ptrace.
        marker = b"\0CI-END:" + run["nonce"].encode() + b"\n"
        broken = False
        for fd in (1, 2):
            try:
                write(fd, marker)
            except BaseException:
                broken = True
        send({"kind": "result", "result": {"id": run["id"], "status": status, "detail": detail,
                                           "images": images, "images_dropped": dropped,
                                           "interpreter_gone": broken}})
        if broken:
            os._exit(0)


_main()
