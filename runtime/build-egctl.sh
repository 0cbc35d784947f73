#!/usr/bin/env bash
# Builds egctl (Envoy Gateway's CLI) from the Go module proxy at the version
# runtime/egctl/go.mod pins, with the go.sum beside it checking every
# module. The chart's tests (deploy/envoy) run its translator, `egctl x
# translate --from gateway-api --to gateway-api,xds`, on each rendering of
# charts/codeinterp: the Gateway API → xDS translation Envoy Gateway's
# controller runs, with the statuses it would write. Nothing of Envoy
# Gateway's dependency graph reaches the server's go.mod: the module in
# runtime/egctl is its own.
#
# Output (never in git):
#   ${CODEINTERP_EGCTL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/codeinterp/egctl-<recipe hash>}/
#     egctl     the binary (static, -trimpath)
#     MANIFEST  the pinned version, the Go toolchain and the binary's
#               sha256; written last (the cache stamp)
#
# Moving the pin: in runtime/egctl,
# `go get -tool github.com/envoyproxy/gateway/cmd/egctl@<version>` then
# `go mod tidy` (and the server's go.mod's github.com/envoyproxy/gateway,
# whose Go types and CRDs the other deploy checks use, to the same version).
#
# Usage: runtime/build-egctl.sh [--print-path]
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MOD=$HERE/egctl
GO=${GO:-go}
RECIPE=$(cat "${BASH_SOURCE[0]}" "$MOD/go.mod" "$MOD/go.sum" | sha256sum | cut -c1-12)
CACHE_ROOT=${XDG_CACHE_HOME:-$HOME/.cache}/codeinterp
OUT=${CODEINTERP_EGCTL_DIR:-$CACHE_ROOT/egctl-$RECIPE}

case "${1:-}" in
  --print-path) echo "$OUT/egctl"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--print-path]" >&2; exit 2 ;;
esac
command -v "$GO" >/dev/null || { echo "build-egctl: needs Go ($GO) on PATH" >&2; exit 1; }
PKG=github.com/envoyproxy/gateway
VERSION=$(cd "$MOD" && GOFLAGS=-mod=readonly "$GO" list -m -f '{{.Version}}' "$PKG")
[ -n "$VERSION" ] || { echo "build-egctl: runtime/egctl/go.mod requires no $PKG" >&2; exit 1; }
if [ -f "$OUT/MANIFEST" ] && [ -x "$OUT/egctl" ]; then
  echo "build-egctl: $OUT/egctl is built ($VERSION)"
  exit 0
fi
started=$SECONDS
tmp=$OUT.tmp.$$
trap 'rm -rf "$tmp"' EXIT
rm -rf "$tmp"
mkdir -p "$tmp"
echo "build-egctl: go build $PKG/cmd/egctl@$VERSION (several minutes once)"
# egctl version reports what internal/cmd/version says; Envoy Gateway's
# release builds set it with -X, as here.
(cd "$MOD" && CGO_ENABLED=0 GOFLAGS=-mod=readonly "$GO" build -trimpath -buildvcs=false \
  -ldflags "-s -w -X $PKG/internal/cmd/version.envoyGatewayVersion=$VERSION" \
  -o "$tmp/egctl" "$PKG/cmd/egctl")
got=$("$tmp/egctl" version --remote=false)
[ "$got" = "$VERSION" ] || { echo "build-egctl: the built egctl says \"$got\", want \"$VERSION\"" >&2; exit 1; }
chmod 0755 "$tmp" "$tmp/egctl"
{
  echo "$PKG $VERSION"
  echo "go $("$GO" env GOVERSION)"
  echo "sha256 $(sha256sum "$tmp/egctl" | cut -d' ' -f1)"
} >"$tmp/MANIFEST"
rm -rf "$OUT"
mv "$tmp" "$OUT"
trap - EXIT
echo "build-egctl: $OUT/egctl ($VERSION, $(du -h "$OUT/egctl" | cut -f1)) in $((SECONDS - started)) s"
