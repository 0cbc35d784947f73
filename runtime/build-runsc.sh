#!/usr/bin/env bash
# Builds runsc, gVisor's OCI runtime, from the Go module proxy at the version
# runtime/runsc/go.mod pins, with the go.sum beside it checking every module
# (and the proxy's checksum database checking go.sum when it is first
# written). A static binary (CGO_ENABLED=0) whose `runsc --version` names
# the pinned pseudo-version, so the server can tell it from any other runsc.
# Nothing of gVisor's dependency graph reaches the server's go.mod: the
# module in runtime/runsc is its own.
#
# Output (never in git):
#   ${CODEINTERP_RUNSC_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/codeinterp/runsc-<recipe hash>}/
#     runsc     the binary with its sentry's seccomp filters precompiled
#               (runtime/runsc/precompile), root-owned 0755 (the server's launcher execs
#               only a root-owned runsc that only root can write)
#     MANIFEST  the pinned version, the Go toolchain and the binary's
#               sha256; written last (the cache stamp)
#
# The name carries a hash of this script, go.mod, go.sum and the
# precompile generator, so moving the pin builds into a new directory and a second run returns at once.
#
# Moving the pin: in runtime/runsc, `go get gvisor.dev/gvisor@<version>`
# then `go mod tidy`, and set PinnedRunscVersion in internal/sandbox/gvisor/pin.go
# to the same version (TestPinMatchesGoMod checks the two agree).
#
# Usage: runtime/build-runsc.sh [--print-path]
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MOD=$HERE/runsc
GO=${GO:-go}
RECIPE=$(cat "${BASH_SOURCE[0]}" "$MOD/go.mod" "$MOD/go.sum" "$MOD/precompile/main.go" | sha256sum | cut -c1-12)
CACHE_ROOT=${XDG_CACHE_HOME:-$HOME/.cache}/codeinterp
OUT=${CODEINTERP_RUNSC_DIR:-$CACHE_ROOT/runsc-$RECIPE}

case "${1:-}" in
  --print-path) echo "$OUT/runsc"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--print-path]" >&2; exit 2 ;;
esac
command -v "$GO" >/dev/null || { echo "build-runsc: needs Go ($GO) on PATH" >&2; exit 1; }
# The pinned version is the one go.mod requires.
VERSION=$(cd "$MOD" && GOFLAGS=-mod=readonly "$GO" list -m -f '{{.Version}}' gvisor.dev/gvisor)
[ -n "$VERSION" ] || { echo "build-runsc: runtime/runsc/go.mod requires no gvisor.dev/gvisor" >&2; exit 1; }
if [ -f "$OUT/MANIFEST" ] && [ -x "$OUT/runsc" ]; then
  echo "build-runsc: $OUT/runsc is built ($VERSION)"
  exit 0
fi
started=$SECONDS
tmp=$OUT.tmp.$$
trap 'rm -rf "$tmp"' EXIT
rm -rf "$tmp"
mkdir -p "$tmp"
echo "build-runsc: go build gvisor.dev/gvisor/runsc@$VERSION (a few minutes once)"
# The module is vendored into a scratch copy (go mod vendor checks every
# module against go.sum, and the build reads nothing else), so that one
# file of it can be replaced: the go branch's
# runsc/boot/filter/filter_precompiled.go registers no precompiled seccomp
# programs, and a sentry without them builds its filter at every start
# (~60-80 ms of CPU per sandbox start and restore). precompile/ writes the
# file gVisor's own Bazel build generates, from gVisor's own
# config.PrecompiledPrograms. -trimpath and no VCS stamp keep the binary
# the same wherever it is built.
work=$tmp/module
mkdir -p "$work"
cp "$MOD/go.mod" "$MOD/go.sum" "$work/"
cp -r "$MOD/precompile" "$work/"
(cd "$work" && "$GO" mod vendor)
(cd "$work" && CGO_ENABLED=0 "$GO" run -mod=vendor ./precompile vendor/gvisor.dev/gvisor/runsc/boot/filter/filter_precompiled.go)
(cd "$work" && CGO_ENABLED=0 "$GO" build -mod=vendor -trimpath -buildvcs=false \
  -ldflags "-s -w -X gvisor.dev/gvisor/runsc/version.version=$VERSION" \
  -o "$tmp/runsc" gvisor.dev/gvisor/runsc)
rm -rf "$work"
got=$("$tmp/runsc" --version | sed -n 1p)
[ "$got" = "runsc version $VERSION" ] || { echo "build-runsc: the built runsc says \"$got\", want \"runsc version $VERSION\"" >&2; exit 1; }
chown 0:0 "$tmp/runsc" 2>/dev/null || true
chmod 0755 "$tmp" "$tmp/runsc"
{
  echo "gvisor.dev/gvisor $VERSION"
  echo "go $("$GO" env GOVERSION)"
  echo "sha256 $(sha256sum "$tmp/runsc" | cut -d' ' -f1)"
} >"$tmp/MANIFEST"
rm -rf "$OUT"
mv "$tmp" "$OUT"
trap - EXIT
echo "build-runsc: $OUT/runsc ($VERSION, $(du -h "$OUT/runsc" | cut -f1)) in $((SECONDS - started)) s"
