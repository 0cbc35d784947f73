#!/usr/bin/env bash
# Builds CPython 3.13.5 for wasm32-wasip1 from Debian sources with Debian's own
# toolchain (clang-19, lld-19) and trixie's wasi-libc, plus static zlib,
# sqlite3, bzip2 and liblzma. No wasi-sdk, nothing outside Debian's archive.
#
# Output (never in git):
#   ${CODEINTERP_RUNTIME_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/codeinterp/cpython-3.13.5-<recipe hash>}/
#     python.wasm          interpreter (WASI command), DWARF stripped, name section kept
#     python-reactor.wasm  the same interpreter as a WASI reactor with the
#                          ci_* exports of runtime/reactor/ci_reactor.c and an exported
#                          __stack_pointer: what snapshots are taken from
#     lib/python3.13/      trimmed stdlib, .py + unchecked-hash .pyc
#     lib/python3.13/site-packages/
#                          Debian's pure-Python packages (PACKAGES below, from
#                          their architecture-all .debs), precompiled
#     PACKAGES             "name version" of each of those .debs
#     MANIFEST             sizes and sha256 of the above; written last (cache stamp)
#
# The directory name carries a hash of this script and reactor/ci_reactor.c, so a
# changed recipe builds into a new directory and a second run with the cache
# present returns at once.
#
# The machine's apt state is never changed: trixie's indexes live in a private
# apt directory under the work dir, pointed at the archive the machine's own
# apt configuration uses (a mirror or proxy an operator set up is honoured).
# The host toolchain comes from the machine's own suites (bookworm) through
# apt-get install.
#
# Usage: runtime/build-python-wasi.sh [--print-dir | --print-archive]
set -euo pipefail

PYVER=3.13.5
PYSHA256=93e583f243454e6e9e4588ca2c2662206ad961659863277afcdb96801647d640
LLVM=19
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RECIPE=$(cat "${BASH_SOURCE[0]}" "$HERE/reactor/ci_reactor.c" | sha256sum | cut -c1-12)
# Debian's pure-Python packages for the guest (architecture all, from trixie:
# built for python3.13). python3-tz is a transitional package for
# python3-pytz; openpyxl's lxml is optional (it falls back to ElementTree);
# pypdf needs typing-extensions only before 3.11.
# tzdata (architecture all too) gives pytz, dateutil.tz and zoneinfo their
# time zones.
PACKAGES=(python3-sympy python3-mpmath python3-networkx python3-dateutil python3-six
          python3-pytz python3-tabulate python3-openpyxl python3-et-xmlfile python3-pypdf tzdata)
CACHE_ROOT=${XDG_CACHE_HOME:-$HOME/.cache}/codeinterp
OUT=${CODEINTERP_RUNTIME_DIR:-$CACHE_ROOT/cpython-$PYVER-$RECIPE}

if [ "${1:-}" = "--print-dir" ]; then echo "$OUT"; exit 0; fi

APT_ETC=${APT_ETC:-/etc/apt}
# The Debian archive URL the machine's apt uses for its own main suite:
# the first one-line "deb URI SUITE ..." or deb822 "URIs:" entry whose
# suite is a plain release (not -security/-updates/-backports). An
# operator's mirror or caching proxy carries every suite, so trixie and
# bookworm both come from it. CODEINTERP_DEBIAN_MIRROR overrides; APT_ETC
# (default /etc/apt) is for the script's own test (runtime/archive_test.go).
archive_url() {
  local f
  for f in "$APT_ETC/sources.list" "$APT_ETC"/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
           if ($(i+1) !~ /-(security|updates|backports)/ && $i ~ /^(https?|file):/) { print $i; exit } }' "$f"
  done
  for f in "$APT_ETC"/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    # deb822: stanzas separated by blank lines; take URIs of a stanza with a
    # plain release suite and Types containing "deb".
    awk 'BEGIN { RS = ""; FS = "\n" }
         { t = ""; u = ""; s = ""
           for (k = 1; k <= NF; k++) {
             if ($k ~ /^Types:/) t = $k; else if ($k ~ /^URIs:/) u = $k; else if ($k ~ /^Suites:/) s = $k }
           sub(/^URIs:[ \t]*/, "", u); split(u, us, /[ \t]+/)
           if (t ~ /[ \t]deb([ \t]|$)/ && s ~ /^Suites:[ \t]*[a-z]+([ \t]|$)/ && us[1] ~ /^(https?|file):/) { print us[1]; exit } }' "$f"
  done
}
if [ "${1:-}" = "--print-archive" ]; then archive_url | sed -n 1p; exit 0; fi
if [ -f "$OUT/MANIFEST" ]; then
  echo "CPython-WASI runtime present: $OUT"
  exit 0
fi

WORK=${WORK:-$CACHE_ROOT/build-$PYVER}
JOBS=${JOBS:-$(nproc)}
SYSROOT=$WORK/sysroot
mkdir -p "$WORK"
cd "$WORK"
T0=$(date +%s)
log() { echo "[build-python-wasi $(( $(date +%s) - T0 ))s] $*"; }
# ticking runs "$@" (a long, silent compile whose output goes to its logs)
# and says every 15 s which step it is, how long it has taken and roughly
# how long it takes on two cores; its status is the command's.
ticking() { # what about cmd...
  local what=$1 about=$2 start n=0 pid
  shift 2
  start=$(date +%s)
  "$@" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    n=$((n + 1))
    if [ $((n % 15)) = 0 ] && kill -0 "$pid" 2>/dev/null; then
      log "$what: $(( $(date +%s) - start ))s so far (about $about on two cores)"
    fi
  done
  wait "$pid"
}

# ------------------------------------------------------------- 1. host packages
need=()
for p in clang-$LLVM lld-$LLVM llvm-$LLVM libclang-rt-$LLVM-dev-wasm32 build-essential \
         pkg-config dpkg-dev tcl bzip2 xz-utils zlib1g-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "missing packages (${need[*]}): run as root or install them" >&2; exit 1; }
  log "apt-get install ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# ------------------------------------------------------------- 2. private apt state
APTD=$WORK/apt
mkdir -p "$APTD"/{lists/partial,cache/archives/partial,sources.list.d,preferences.d}
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
MIRROR=${CODEINTERP_DEBIAN_MIRROR:-$(archive_url | sed -n 1p)}
[ -n "$MIRROR" ] || { echo "no Debian archive found in the machine's apt configuration (set CODEINTERP_DEBIAN_MIRROR)" >&2; exit 1; }
MIRROR=${MIRROR%/}
cat > "$APTD/sources.list" <<SRC
deb [signed-by=$KEYRING] $MIRROR trixie main
deb-src [signed-by=$KEYRING] $MIRROR trixie main
deb-src [signed-by=$KEYRING] $MIRROR bookworm main
SRC
# A changed mirror means fresh indexes.
if [ "$(cat "$APTD/mirror" 2>/dev/null)" != "$MIRROR" ]; then
  rm -rf "$APTD/lists" && mkdir -p "$APTD/lists/partial"
  echo "$MIRROR" > "$APTD/mirror"
  rm -f dl/.fetched-packages
fi
APT_OPTS=(-o "Dir::Etc::SourceList=$APTD/sources.list" -o "Dir::Etc::SourceParts=$APTD/sources.list.d"
  -o "Dir::Etc::Preferences=$APTD/preferences" -o "Dir::Etc::PreferencesParts=$APTD/preferences.d"
  -o "Dir::State::Lists=$APTD/lists" -o "Dir::Cache=$APTD/cache" -o "Dir::State::status=/dev/null"
  -o "APT::Architecture=amd64" -o "APT::Sandbox::User=root")
mkdir -p dl
if [ ! -f dl/.fetched ]; then
  rm -f dl/*
  log "private apt: trixie + bookworm source indexes"
  apt-get "${APT_OPTS[@]}" -qq update
  ( cd dl
    apt-get "${APT_OPTS[@]}" -qq source --download-only python3.13
    apt-get "${APT_OPTS[@]}" -qq source --download-only zlib/bookworm sqlite3/bookworm bzip2/bookworm xz-utils/bookworm
    apt-get "${APT_OPTS[@]}" -qq download wasi-libc/trixie )
  touch dl/.fetched
fi
mkdir -p dl/packages
# The stamp holds the package list: a changed list downloads again.
if [ "$(cat dl/.fetched-packages 2>/dev/null)" != "${PACKAGES[*]}" ]; then
  rm -f dl/packages/*
  log "private apt: ${PACKAGES[*]}"
  [ -n "$(ls "$APTD/lists" | grep -i trixie || true)" ] || apt-get "${APT_OPTS[@]}" -qq update
  ( cd dl/packages && apt-get "${APT_OPTS[@]}" -qq download "${PACKAGES[@]/%//trixie}" )
  for p in "${PACKAGES[@]}"; do
    f=$(ls dl/packages/${p}_*_all.deb 2>/dev/null | sed -n 1p)
    [ -n "$f" ] || { echo "package $p: no architecture-all .deb downloaded" >&2; exit 1; }
  done
  echo "${PACKAGES[*]}" > dl/.fetched-packages
fi
echo "$PYSHA256  dl/python3.13_$PYVER.orig.tar.xz" | sha256sum -c --quiet -

# ------------------------------------------------------------- 3. sources
log "extract"
rm -rf src && mkdir -p src
# The CPython tree holds the native build Python (a build tool only, ~4 min):
# it is kept across recipe edits of the later steps, guarded by a stamp.
if [ ! -f "Python-$PYVER/.native-built" ]; then
  rm -rf "Python-$PYVER"
  tar xJf "dl/python3.13_$PYVER.orig.tar.xz"
fi
rm -rf "Python-$PYVER/builddir/wasi"
tar -C src -xf dl/zlib_*.orig.tar.*
tar -C src -xf dl/sqlite3_*[0-9].orig.tar.xz
tar -C src -xf dl/bzip2_*.orig.tar.*
tar -C src -xf dl/xz-utils_*.orig.tar.xz
ZLIB_DIR=$(ls -d src/zlib-*)
SQLITE_DIR=$(ls -d src/sqlite3-*)
BZ_DIR=$(ls -d src/bzip2-*)
XZ_DIR=$(ls -d src/xz-*)

# ------------------------------------------------------------- 4. sysroot
# trixie's wasi-libc has <pthread.h> (single-threaded stubs) that 3.13 needs.
# Copying it into a private sysroot also keeps the host /usr/include out.
log "sysroot (trixie wasi-libc)"
rm -rf "$SYSROOT" wasi-libc-deb
dpkg-deb -x dl/wasi-libc_*.deb wasi-libc-deb
mkdir -p "$SYSROOT/include" "$SYSROOT/lib"
cp -a wasi-libc-deb/usr/include/wasm32-wasi "$SYSROOT/include/"
cp -a wasi-libc-deb/usr/lib/wasm32-wasi "$SYSROOT/lib/"
PC=$SYSROOT/lib/wasm32-wasi/pkgconfig
mkdir -p "$PC"
INC=$SYSROOT/include/wasm32-wasi
LIB=$SYSROOT/lib/wasm32-wasi

export CC="clang-$LLVM --target=wasm32-wasi --sysroot=$SYSROOT"
export CPP="clang-$LLVM --target=wasm32-wasi --sysroot=$SYSROOT -E"
export CXX="clang++-$LLVM --target=wasm32-wasi --sysroot=$SYSROOT"
export AR=llvm-ar-$LLVM RANLIB=llvm-ranlib-$LLVM

pcfile() { # name version libs
  cat > "$PC/$1.pc" <<PCEOF
Name: $1
Description: $1 (wasm32-wasi, static)
Version: $2
Libs: -L$LIB $3
Cflags: -I$INC
PCEOF
}

# ------------------------------------------------------------- 5. zlib
log "zlib"
( cd "$ZLIB_DIR"
  CFLAGS="-O2" ./configure --static --prefix="$SYSROOT" --libdir="$LIB" --includedir="$INC" >/dev/null
  make -j"$JOBS" libz.a >/dev/null 2>&1
  make install >/dev/null 2>&1 )

# ------------------------------------------------------------- 6. bzip2
log "bzip2"
( cd "$BZ_DIR"
  for f in blocksort huffman crctable randtable compress decompress bzlib; do
    $CC -O2 -D_FILE_OFFSET_BITS=64 -c $f.c -o $f.o
  done
  $AR rcs "$LIB/libbz2.a" blocksort.o huffman.o crctable.o randtable.o compress.o decompress.o bzlib.o
  cp bzlib.h "$INC/" )
pcfile bzip2 1.0.8 -lbz2

# ------------------------------------------------------------- 7. liblzma
log "liblzma"
( cd "$XZ_DIR"
  # WASI has no signals; the single-threaded mythread_sigmask helper (used
  # only by the xz tool, which we do not build) is compiled out.
  sed -i 's|^#if !(defined(_WIN32) \&\& !defined(__CYGWIN__))$|& \&\& !defined(__wasi__)|' src/common/mythread.h
  grep -q '!defined(__wasi__)' src/common/mythread.h
  mkdir -p bld && cd bld
  ../configure --host=wasm32-unknown-wasi --build="$(../build-aux/config.guess)" \
    --prefix="$SYSROOT" --libdir="$LIB" --includedir="$INC" \
    --disable-shared --enable-static --disable-threads --disable-xz --disable-xzdec \
    --disable-lzmadec --disable-lzmainfo --disable-lzma-links --disable-scripts \
    --disable-doc --disable-nls --disable-rpath >configure.log 2>&1 \
    CFLAGS="-O2"
  make -j"$JOBS" -C src/liblzma >make.log 2>&1
  make -C src/liblzma install >install.log 2>&1 )

# ------------------------------------------------------------- 8. sqlite
log "sqlite3"
( cd "$SQLITE_DIR"
  mkdir -p bld-native && cd bld-native
  CC=gcc CPP= CXX= AR=ar RANLIB=ranlib ../configure --disable-tcl >/dev/null
  CC=gcc make sqlite3.c >/dev/null )
# SQLite 3.40 predates its own WASI support: stub chmod/chown/euid and the
# fcntl lock constants, and make the lock-free "unix-none" VFS the default.
cat > "$WORK/sqlite-wasi-shim.h" <<'SHIM'
#include <sys/types.h>
#define F_RDLCK 0
#define F_WRLCK 1
#define F_UNLCK 2
#define F_GETLK 5
#define F_SETLK 6
#define F_SETLKW 7
static inline int fchmod(int fd, mode_t m) { (void)fd; (void)m; return 0; }
static inline int fchown(int fd, uid_t u, gid_t g) { (void)fd; (void)u; (void)g; return 0; }
static inline uid_t geteuid(void) { return 0; }
SHIM
( cd "$SQLITE_DIR/bld-native"
  $CC -O2 -c sqlite3.c -o sqlite3-wasm.o -include "$WORK/sqlite-wasi-shim.h" \
    -DSQLITE_THREADSAFE=0 -DSQLITE_OMIT_LOAD_EXTENSION -DSQLITE_OMIT_WAL \
    -DSQLITE_MAX_MMAP_SIZE=0 -DSQLITE_DEFAULT_UNIX_VFS='"unix-none"' \
    -D_WASI_EMULATED_GETPID
  $AR rcs "$LIB/libsqlite3.a" sqlite3-wasm.o
  cp sqlite3.h sqlite3ext.h "$INC/" )
pcfile sqlite3 "$(cat "$SQLITE_DIR/VERSION")" -lsqlite3

# ------------------------------------------------------------- 9. native build python
if [ ! -f "Python-$PYVER/.native-built" ]; then
  log "native build python (a build tool for the cross build)"
  native_python() (
    cd "Python-$PYVER"
    mkdir -p builddir/build && cd builddir/build
    CC=gcc CPP= CXX=g++ AR=ar RANLIB=ranlib ../../configure -C >configure.log 2>&1
    CC=gcc CPP= CXX=g++ AR=ar RANLIB=ranlib make -j"$JOBS" >make.log 2>&1
  )
  ticking "native build python" "4 min" native_python
  touch "Python-$PYVER/.native-built"
fi
BUILDPY=$WORK/Python-$PYVER/builddir/build/python

# ------------------------------------------------------------- 10. cross build
# clock_nanosleep(TIMER_ABSTIME) becomes a poll_oneoff with an absolute clock
# subscription, which wazero rejects (ENOTSUP): time.sleep() would raise.
log "cross configure + make (wasm32-wasip1)"
cat > "$WORK/config.site-wasm32-wasi" <<SITE
. "$WORK/Python-$PYVER/Tools/wasm/config.site-wasm32-wasi"
ac_cv_func_clock_nanosleep=no
ac_cv_lib_rt_clock_nanosleep=no
SITE
cross_python() (
  cd "Python-$PYVER"
  mkdir -p builddir/wasi && cd builddir/wasi
  PKG_CONFIG_PATH= PKG_CONFIG_SYSROOT_DIR= PKG_CONFIG_LIBDIR="$PC" \
  CONFIG_SITE="$WORK/config.site-wasm32-wasi" \
    ../../configure -C --host=wasm32-wasip1 --build="$(../../config.guess)" \
      --with-build-python="$BUILDPY" >configure.log 2>&1 || {
        tail -30 configure.log >&2; exit 1; }
  make -j"$JOBS" >make.log 2>&1 || { tail -40 make.log >&2; exit 1; }
)
ticking "cross configure + make" "5 min" cross_python

# The reactor: the same objects and libraries as python.wasm's link, with
# ci_reactor.o in place of Programs/python.o and wasi-libc's reactor crt.
log "reactor link (python-reactor.wasm)"
( cd "Python-$PYVER/builddir/wasi"
  vars() { make -s --no-print-directory --eval "ci-print-$1: ; @echo \$($1)" "ci-print-$1"; }
  # shellcheck disable=SC2046
  $CC -c $(vars PY_CORE_CFLAGS) -o ci_reactor.o "$HERE/reactor/ci_reactor.c"
  # shellcheck disable=SC2046
  $CC $(vars PY_CORE_LDFLAGS) $(vars LINKFORSHARED) -mexec-model=reactor \
      -Wl,--export=__stack_pointer -o python-reactor.wasm ci_reactor.o \
      $(vars LIBRARY) $(vars MODLIBS) $(vars LIBS) $(vars SYSLIBS) >reactor.log 2>&1 || {
        cat reactor.log >&2; exit 1; } )

# ------------------------------------------------------------- 11. package
log "package"
STAGE=$WORK/stage
rm -rf "$STAGE" && mkdir -p "$STAGE/lib"
llvm-objcopy-$LLVM --strip-debug "Python-$PYVER/builddir/wasi/python.wasm" "$STAGE/python.wasm"
llvm-objcopy-$LLVM --strip-debug "Python-$PYVER/builddir/wasi/python-reactor.wasm" "$STAGE/python-reactor.wasm"
cp -a "Python-$PYVER/Lib" "$STAGE/lib/python3.13"
cp "Python-$PYVER"/builddir/wasi/build/lib.wasi-wasm32-3.13/_sysconfigdata_*.py "$STAGE/lib/python3.13/"
mkdir -p "$STAGE/lib/python3.13/lib-dynload"
( cd "$STAGE/lib/python3.13"
  rm -rf test idlelib tkinter turtledemo turtle.py ensurepip venv pydoc_data ctypes curses \
         __phello__ site-packages unittest/test sqlite3/test lib2to3 distutils
  find . -name __pycache__ -prune -exec rm -rf {} +
  # Debian's pure-Python packages: site.py puts site-packages on sys.path.
  # Their tests are trimmed like the stdlib's.
  mkdir -p site-packages
  for d in "$WORK"/dl/packages/*_all.deb; do
    rm -rf "$WORK/pkg-x" && dpkg-deb -x "$d" "$WORK/pkg-x"
    echo "$(dpkg-deb -f "$d" Package) $(dpkg-deb -f "$d" Version)" >> "$STAGE/PACKAGES"
    if [ -d "$WORK/pkg-x/usr/share/zoneinfo" ]; then
      # tzdata: the guest sees only /usr/local/lib. Symlinks are resolved
      # (a read-only mount serves plain files); right/ and posix/ are
      # duplicates of the tree.
      mkdir -p "$STAGE/lib/zoneinfo"
      ( cd "$WORK/pkg-x/usr/share/zoneinfo" && tar -ch --exclude=./right --exclude=./posix . ) |
        tar -C "$STAGE/lib/zoneinfo" -x
      continue
    fi
    [ -d "$WORK/pkg-x/usr/lib/python3/dist-packages" ] || continue
    cp -a "$WORK/pkg-x/usr/lib/python3/dist-packages/." site-packages/
  done
  rm -rf "$WORK/pkg-x"
  find site-packages -depth -type d \( -name tests -o -name __pycache__ \) -exec rm -rf {} +
  # Debian's pytz and dateutil read the system's /usr/share/zoneinfo: point
  # them at the guest's copy.
  grep -rlZ --include='*.py' -e /usr/share/zoneinfo -e "'/usr','share'" site-packages |
    xargs -0 -r sed -i -e 's|/usr/share/zoneinfo|/usr/local/lib/zoneinfo|g' \
                       -e "s|os.path.join('/usr','share',|os.path.join('/usr','local','lib',|"
  # sympy asks ctypes for sizeof(C long) only; CPython-WASI has no _ctypes
  # (libffi has no wasm32-wasi port), and wasm32's C long is 4 bytes.
  sed -i 's|^from ctypes import c_long, sizeof$|try:\n    from ctypes import c_long, sizeof\nexcept ImportError:  # codeinterp: CPython-WASI has no _ctypes; a wasm32 C long is 4 bytes\n    c_long = None\n    def sizeof(_t): return 4|' \
    site-packages/sympy/external/gmpy.py
  grep -q 'codeinterp: CPython-WASI has no _ctypes' site-packages/sympy/external/gmpy.py
  # unchecked-hash pycs stay valid whatever the mtimes become (the guest
  # mount is read-only: a stale pyc would be recompiled on every start)
  "$BUILDPY" -m compileall -q -j0 -o 0 --invalidation-mode unchecked-hash . >/dev/null )
touch "$STAGE/lib/python3.13/lib-dynload/.keep"
# Check the modules the product promises are really built in.
"$BUILDPY" - "Python-$PYVER/builddir/wasi" <<'PYEOF'
import pathlib, sys
setup = pathlib.Path(sys.argv[1], "Modules", "Setup.stdlib").read_text()
want = ["_bz2", "_lzma", "zlib", "_sqlite3", "_decimal", "_json", "math"]
missing = [m for m in want if not any(l.startswith(m + " ") for l in setup.splitlines())]
if missing:
    sys.exit(f"modules not built: {missing}")
PYEOF
( cd "$STAGE"
  { echo "cpython $PYVER wasm32-wasip1 recipe $RECIPE built $(date -u +%FT%TZ)"
    echo "python.wasm $(stat -c %s python.wasm) $(sha256sum python.wasm | cut -c1-64)"
    echo "python-reactor.wasm $(stat -c %s python-reactor.wasm) $(sha256sum python-reactor.wasm | cut -c1-64)"
    echo "stdlib files $(find lib -type f | wc -l) bytes $(du -sb lib | cut -f1)"
    echo "packages $(sha256sum PACKAGES | cut -c1-64)"
  } > MANIFEST.tmp )
mkdir -p "$(dirname "$OUT")"
rm -rf "$OUT.tmp" && mv "$STAGE" "$OUT.tmp"
mv "$OUT.tmp/MANIFEST.tmp" "$OUT.tmp/MANIFEST"
rm -rf "$OUT" && mv "$OUT.tmp" "$OUT"
# Keep only the downloads: the build trees are large and a finished runtime
# never needs them again.
find "$WORK" -mindepth 1 -maxdepth 1 ! -name dl ! -name apt ! -name "Python-$PYVER" -exec rm -rf {} +
rm -rf "$WORK/Python-$PYVER/builddir/wasi"
log "done: $OUT"
cat "$OUT/MANIFEST"
