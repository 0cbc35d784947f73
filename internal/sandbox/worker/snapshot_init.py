# codeinterp snapshot initialisation: runs once, in a trusted step, in a
# fresh reactor instance right after ci_init; linear memory and the
# exported globals are then saved as the image every session starts from.
# No user code has run in this interpreter, and none ever will: sessions
# run in copies. It imports what models commonly use so that sessions
# never pay for it, then leaves nothing session-specific behind
# (argv/environ cleared, stdio flushed, no file left open).
import sys, os, gc, json

STDLIB = """ast base64 bisect calendar cmath collections copy csv dataclasses datetime decimal
difflib enum fractions functools glob gzip hashlib heapq io itertools json linecache
math operator pathlib pprint random re secrets shutil statistics string struct
tempfile textwrap time traceback typing unicodedata uuid zipfile zlib sqlite3 bz2 lzma
tarfile array fnmatch html html.parser xml.etree.ElementTree email.utils urllib.parse
codecs contextlib abc numbers warnings weakref locale""".split()

STDLIB.append("zoneinfo")
for _name in STDLIB:
    try:
        __import__(_name)
    except Exception as e:
        print("snapshot: stdlib %s: %s" % (_name, e), file=sys.stderr)

# The runtime ships tzdata's zones where the guest can read them.
import zoneinfo
zoneinfo.reset_tzpath(["/usr/local/lib/zoneinfo"])

# The operator's package set: (import name, what to import for the work
# most programs do with it).
PACKAGES = [
    ("sympy", ["sympy"]),
    ("mpmath", ["mpmath"]),
    ("networkx", ["networkx"]),
    ("dateutil", ["dateutil", "dateutil.parser", "dateutil.relativedelta", "dateutil.rrule", "dateutil.tz"]),
    ("pytz", ["pytz"]),
    ("tabulate", ["tabulate"]),
    ("openpyxl", ["openpyxl"]),
    ("pypdf", ["pypdf"]),
]
_importable = []
for _pkg, _mods in PACKAGES:
    try:
        for _m in _mods:
            __import__(_m)
        _importable.append(_pkg)
    except Exception as e:
        print("snapshot: package %s: %s: %s" % (_pkg, type(e).__name__, e), file=sys.stderr)

# First-use costs of the kernel's steps (AST node types, compile paths).
_t = compile(b"_ = 1\n_", "<warmup>", "exec", 1024)
exec(compile(_t, "<warmup>", "exec"), {"__builtins__": __builtins__})

# wazero numbers a session's preopens 3, 4, 5 (stdlib, /tmp, /mnt/data)
# as here, and nothing else may be open: an fd the image remembers would
# name whatever the session opens next under that number.
for _fd in range(6, 256):
    try:
        os.fstat(_fd)
    except OSError:
        continue
    raise SystemExit("snapshot: descriptor %d is still open" % _fd)

sys.argv = [""]
os.environ.clear()
for _s in (sys.stdout, sys.stderr):
    _s.flush()
# Everything imported so far lives as long as the interpreter: move it out
# of the collector's generations, so a collection in a session does not
# touch (and copy) every page of the image.
gc.collect()
gc.freeze()
os.write(1, ("\x00CI-SNAPSHOT:" + json.dumps(sorted(_importable)) + "\n").encode())
del _name, _pkg, _mods, _m, _importable, _t, _s, _fd
