#!/usr/bin/env bash
# Builds a codeinterp OCI image with podman (`make image`; image/README.md).
#
#   image/build.sh [--variant wasm|gvisor] [--base IMAGE] [--tag TAG] [--no-cache]
#
#   --variant  wasm (default): codeinterp/extproc, the server, CPython-WASI and
#              its precompiled wazero cache on an empty base;
#              gvisor: codeinterp/extproc-gvisor, the same on Debian with
#              the pinned runsc (runtime/build-runsc.sh) and the sandbox's
#              root filesystem (runtime/build-gvisor-rootfs.sh).
#   --base     a Debian image to start from (e.g. docker.io/library/debian:bookworm-slim
#              where a registry is reachable). Default: one made here by
#              mmdebstrap from this machine's apt sources.
#   --tag      the image tag (default: the VERSION file).
#   --no-cache rebuild everything: the mmdebstrap base and every layer
#              (image/reproducible.sh uses it to build twice from scratch).
#
# Environment: PODMAN_RUNTIME (default runc: podman's default crun refuses
# hybrid-cgroup hosts), SUITE (default: this machine's Debian codename),
# IMAGE_SOURCE (the org.opencontainers.image.source label).
#
# Everything it logs goes to stderr; the one line on stdout, printed last, is
# the image reference it built (localhost/codeinterp/extproc:TAG).
#
# Reproducible as far as the tools allow: SOURCE_DATE_EPOCH is the commit's
# time (mmdebstrap clamps file times to it, podman build --timestamp stamps
# every layer file and the image with it), extproc is built with -trimpath and
# no build id. image/reproducible.sh checks it.
set -euo pipefail

variant=wasm base="" tag="" nocache=()
while (($#)); do
  case $1 in
    --variant) variant=${2:?--variant needs wasm or gvisor}; shift 2 ;;
    --base) base=${2:?--base needs an image}; shift 2 ;;
    --tag) tag=${2:?--tag needs a tag}; shift 2 ;;
    --no-cache) nocache=(--no-cache); shift ;;
    *) echo "build.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
case $variant in
  wasm) repo=codeinterp/extproc ;;
  gvisor) repo=codeinterp/extproc-gvisor ;;
  *) echo "build.sh: --variant must be wasm or gvisor, not $variant" >&2; exit 2 ;;
esac

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
T0=$(date +%s)
log() { echo "[image $variant $(($(date +%s) - T0))s] $*" >&2; }
[ "$(id -u)" = 0 ] || { echo "build.sh: run as root (podman's root storage; the precompile step needs writable cgroups)" >&2; exit 1; }
bash image/install-podman.sh
for tool in go git; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool not found" >&2; exit 1; }
done

RUNTIME=${PODMAN_RUNTIME:-runc}
: "${tag:=$(cat VERSION)}"
ref=localhost/$repo:$tag
REVISION=$(git rev-parse HEAD)
# A build from a modified tree says so: its bytes are not the commit's.
[ -z "$(git status --porcelain)" ] || REVISION+=-dirty
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
CREATED=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
SOURCE=${IMAGE_SOURCE:-https://github.com/codeinterp/codeinterp}
# The run options image-test uses too: runc, and explicit rlimits (without
# them both runtimes fail to set rlimits here). Open files: as many as this
# machine allows (gVisor's sentry holds a host descriptor per open file;
# 1024 is too few to import pandas).
PODMAN=(podman --runtime "$RUNTIME")
ULIMITS=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit nproc=1024:1024)

WORK=$ROOT/bin/image
CTX=$WORK/$variant
rm -rf "$CTX" && mkdir -p "$CTX/runtime" "$CTX/cache"

# ------------------------------------------------------------ 1. extproc
# Static (no cgo: the image has no libc), -trimpath and no build id so the
# bytes depend on the source and the toolchain only.
# wasm-worker is built the same way in the same step: the server uses it
# only when its build information matches its own.
log "go build extproc and wasm-worker (static, -trimpath)"
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w -buildid=' -o "$CTX/" ./cmd/extproc ./cmd/wasm-worker

# ------------------------------------------------------------ 2. runtime
# The same CPython-WASI the tests use (make runtime); minutes on the first
# build, seconds after. Its default compilation cache (wazero-cache, where
# tests that set no cache_dir write) is a cache, not part of the runtime.
log "CPython-WASI runtime"
bash runtime/build-python-wasi.sh >&2
rt=$(bash runtime/build-python-wasi.sh --print-dir)
tar -C "$rt" --exclude=./wazero-cache -cf - . | tar -C "$CTX/runtime" -xf -
[ -f "$CTX/runtime/python.wasm" ] || { echo "build.sh: $rt has no python.wasm" >&2; exit 1; }

# ------------------------------------------------------------ 3. base
if [ -z "$base" ]; then
  SUITE=${SUITE:-$(. /etc/os-release && echo "$VERSION_CODENAME")}
  # The machine's own Debian mirrors for SUITE and its -updates and
  # -security suites, as apt sees them (never a hard-coded host).
  mapfile -t mirrors < <(bash runtime/debian-mirrors.sh "$SUITE")
  ((${#mirrors[@]})) || { echo "build.sh: no apt source for $SUITE in this machine's apt configuration (run apt-get update?)" >&2; exit 1; }
  base=localhost/codeinterp/debian:$SUITE
  BASECTX=$WORK/debian-$SUITE
  tarball=$BASECTX/rootfs.tar
  stamp="$SUITE $SOURCE_DATE_EPOCH ${mirrors[*]}"
  if ((${#nocache[@]})) || [ "$(cat "$BASECTX/stamp" 2>/dev/null)" != "$stamp" ] || ! podman image exists "$base"; then
    log "mmdebstrap $SUITE (minbase) from: ${mirrors[*]}"
    rm -rf "$BASECTX" && mkdir -p "$BASECTX"
    mmdebstrap --quiet --variant=minbase \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
      "$SUITE" "$tarball" "${mirrors[@]}" >&2
    cp image/Containerfile.debian "$BASECTX/Containerfile"
    "${PODMAN[@]}" build --quiet "${nocache[@]}" --timestamp "$SOURCE_DATE_EPOCH" -t "$base" "$BASECTX" >&2
    echo "$stamp" > "$BASECTX/stamp"
  fi
  log "base $base (mmdebstrap, $(du -h "$tarball" | cut -f1) tarball)"
else
  log "base $base"
fi

packages=ca-certificates
if [ "$variant" = gvisor ]; then
  # The image needs the pinned runsc (built from the Go module proxy, the
  # same binary make setup builds; not Debian's package); the sandbox's
  # Python and packages are its own root filesystem (the same tree make
  # setup builds), not the image's /usr.
  log "pinned runsc"
  GO=${GO:-go} bash runtime/build-runsc.sh >&2
  runsc=$(GO=${GO:-go} bash runtime/build-runsc.sh --print-path)
  mkdir -p "$CTX/runsc"
  cp -p "$runsc" "$(dirname "$runsc")/MANIFEST" "$CTX/runsc/"
  log "gVisor sandbox root filesystem"
  bash runtime/build-gvisor-rootfs.sh >&2
  rootfs=$(bash runtime/build-gvisor-rootfs.sh --print-dir)
  # Hard links when the cache and the context share a file system (the
  # tree is large and read-only); a copy otherwise. Owners and modes kept.
  cp -al "$rootfs" "$CTX/rootfs" 2>/dev/null || { rm -rf "$CTX/rootfs"; cp -a "$rootfs" "$CTX/rootfs"; }
fi

build() { # target image [podman build options]
  "${PODMAN[@]}" build "${@:3}" "${ULIMITS[@]}" --timestamp "$SOURCE_DATE_EPOCH" \
    --build-arg BASE="$base" --build-arg PACKAGES="$packages" \
    --build-arg VERSION="$tag" --build-arg REVISION="$REVISION" \
    --build-arg CREATED="$CREATED" --build-arg SOURCE="$SOURCE" \
    -f image/Containerfile --target "$1" -t "$2" "$CTX" >&2
}

# ------------------------------------------------------------ 4. precompile
# The image's own extproc fills the compilation cache, at the image's own
# paths, through the server's start-up path (exec runs the provider's
# Prepare, then one cell): whatever that step writes, and only that, goes
# into the image. --privileged for writable cgroups (the sandbox refuses to
# run without them), in a private cgroup namespace so nothing is made in
# the host's hierarchy.
log "podman build --target $variant-nocache"
stage=localhost/codeinterp/build-$variant:nocache
build "$variant-nocache" "$stage" "${nocache[@]}"
log "precompile: extproc exec in $stage"
out=$("${PODMAN[@]}" run --rm "${ULIMITS[@]}" --privileged --cgroupns=private --network=none \
  -v "$CTX/cache:/var/cache/codeinterp" "$stage" exec -c 'print("precompiled")') ||
  { echo "build.sh: extproc exec in $stage failed:" >&2; echo "$out" >&2; exit 1; }
grep -q '"status": "completed"' <<<"$out" && grep -q '"stdout": "precompiled\\n"' <<<"$out" ||
  { echo "build.sh: extproc exec in $stage did not complete:" >&2; echo "$out" >&2; exit 1; }
# The snapshot exec took holds a string hash seed: never ship one (every
# pod takes its own at start, into sandbox.snapshot_dir).
find "$CTX/cache" -type d -name snapshots -prune -exec rm -rf {} +
[ -n "$(find "$CTX/cache" -type f)" ] || { echo "build.sh: the precompile step wrote nothing to $CTX/cache" >&2; exit 1; }
log "compilation cache: $(du -sh "$CTX/cache" | cut -f1)"

# ------------------------------------------------------------ 5. image
printf 'version=%s\nrevision=%s\ncreated=%s\nsource=%s\n' "$tag" "$REVISION" "$CREATED" "$SOURCE" > "$CTX/image-info"
# On the layers just built (even with --no-cache): the image's Debian
# packages, binary and runtime are the ones the cache was compiled with.
log "podman build --target $variant"
build "$variant" "$ref"
podman untag "$stage" "$stage"
log "built $ref: id $(podman image inspect --format '{{.Id}}' "$ref" | cut -c1-12), $(podman image inspect --format '{{.Size}}' "$ref" | numfmt --to=iec) uncompressed, revision $REVISION"
echo "$ref"
