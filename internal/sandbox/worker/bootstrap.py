# codeinterp guest bootstrap: runs once per interpreter, before any user code.
# It reads programs framed as b"<nonce> <length>[ warm]\n<source>" from fd 0, runs
# each with the cell runner (sandbox/internal/cellrunner, prepended to this
# file) in one persistent namespace (state survives between runs, as in a
# notebook), and after each run writes b"\0CI:<nonce>:<status>\n" to fd 2 in
# a single write. The host treats only that exact write as the end of the
# run. Anything here is reachable by user code too: it is plumbing, not a
# wall — the walls are wasm, wazero's WASI and the worker process around it.
import io, os, sys

# The session's namespace and cell count live outside the loop, so that the
# loop can return to the host between cells (a checkpoint: the host reads
# the memory with no call active) and be entered again, the state intact.
_codeinterp_session = None

def _codeinterp_loop(warmup=True):
    global _codeinterp_session
    if warmup:
        _codeinterp_warmup()
    read, write = os.read, os.write
    if _codeinterp_session is None:
        # The descriptors open before any user code (stdio, the preopened
        # mounts): a checkpoint cannot carry any other (yield, below).
        _codeinterp_session = {"ns": _codeinterp_namespace(), "n": 0, "fds": _codeinterp_open_fds()}
    sess = _codeinterp_session
    ns = sess["ns"]
    sys.stdin = io.StringIO("")  # input() gets EOF instead of eating the next program
    sys.argv = [""]

    # The host writes a program's header and source in one write, and the
    # next program only after this one's status: read in chunks (a byte at
    # a time, the header alone was ~30 host calls), keeping whatever follows
    # what was asked for. A chunk is never larger than what is still
    # missing: after a program filled the memory, a large read buffer would
    # fail with MemoryError in here.
    pending = bytearray()

    def take(upto):
        while True:
            if upto is None:
                i = pending.find(b"\n")
                if i >= 0:
                    out = bytes(pending[:i])
                    del pending[:i + 1]
                    return out
                want = 64  # "<16 hex digits> <length>"
            elif len(pending) >= upto:
                out = bytes(pending[:upto])
                del pending[:upto]
                return out
            else:
                want = min(upto - len(pending), 1 << 20)
            chunk = read(0, want)
            if not chunk:
                os._exit(0)
            pending.extend(chunk)

    while True:
        header = take(None).split()
        src = take(int(header[1]))
        if len(header) > 2 and header[2] == b"yield":
            # A checkpoint between cells: return to the host, unless user
            # code holds descriptors a restored session would not have
            # (their numbers could name other files after a restore).
            extra = sorted(set(_codeinterp_open_fds()) - set(sess["fds"]))
            if extra:
                write(2, b"\0CI:" + header[0] + b":openfiles\n")
                continue
            write(2, b"\0CI:" + header[0] + b":yielded\n")
            return
        if len(header) > 2:
            # The worker's own warm-up (worker.go, warmUp), before the
            # session is handed over: the whole path of a run, in a
            # namespace thrown away, not counted as a cell.
            status = _codeinterp_run(src, "<warmup>", _codeinterp_namespace())
        else:
            sess["n"] += 1
            status = _codeinterp_run(src, "<cell %d>" % sess["n"], ns)
        _codeinterp_flush()
        write(2, b"\0CI:" + header[0] + b":" + status.encode() + b"\n")

def _codeinterp_open_fds(limit=256):
    fds = []
    for fd in range(3, limit):
        try:
            os.fstat(fd)
        except OSError:
            continue
        fds.append(fd)
    return fds

_codeinterp_loop()
