# codeinterp post-restore: runs first in every session started from a
# snapshot, before the kernel. Every instance of one snapshot starts with
# the same memory, so whatever state was seeded at snapshot time is
# reseeded here from this session's entropy (os.urandom is the session's
# crypto/rand). The hash seed cannot change after start-up; it is fresh
# per snapshot and snapshots rotate (docs/security.md).
import os as _os, random as _random, sys as _sys

_random.seed(_os.urandom(32))
_m = _sys.modules.get("tempfile")
if _m is not None:
    _m._name_sequence = None  # its Random is made lazily, then kept
_m = _sys.modules.get("sympy.core.random")
if _m is not None:
    _m.rng = _random.Random(_os.urandom(32))
    if hasattr(_m, "_assumptions_rng"):
        _m._assumptions_rng = _random.Random(_os.urandom(32))
_sys.argv = [""]
_os.environ.clear()
del _os, _random, _sys, _m
