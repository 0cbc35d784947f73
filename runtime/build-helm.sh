#!/usr/bin/env bash
# Builds helm (Helm 4) from the Go module proxy at the version
# runtime/helm/go.mod pins, with the go.sum beside it checking every module.
# The chart's tests (deploy/envoy) drive this binary: helm lint --strict and
# helm template of charts/codeinterp. Nothing of Helm's dependency graph
# reaches the server's go.mod: the module in runtime/helm is its own (its
# tests render the chart with Helm's engine and an in-memory cluster, for
# what `helm template` cannot show: lookup across upgrades).
#
# Output (never in git):
#   ${CODEINTERP_HELM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/codeinterp/helm-<recipe hash>}/
#     helm      the binary (static, -trimpath)
#     MANIFEST  the pinned version, the Go toolchain and the binary's
#               sha256; written last (the cache stamp)
#
# Moving the pin: in runtime/helm, `go get -tool helm.sh/helm/v4/cmd/helm@<version>`
# then `go mod tidy`.
#
# Usage: runtime/build-helm.sh [--print-path]
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MOD=$HERE/helm
GO=${GO:-go}
RECIPE=$(cat "${BASH_SOURCE[0]}" "$MOD/go.mod" "$MOD/go.sum" | sha256sum | cut -c1-12)
CACHE_ROOT=${XDG_CACHE_HOME:-$HOME/.cache}/codeinterp
OUT=${CODEINTERP_HELM_DIR:-$CACHE_ROOT/helm-$RECIPE}

case "${1:-}" in
  --print-path) echo "$OUT/helm"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--print-path]" >&2; exit 2 ;;
esac
command -v "$GO" >/dev/null || { echo "build-helm: needs Go ($GO) on PATH" >&2; exit 1; }
VERSION=$(cd "$MOD" && GOFLAGS=-mod=readonly "$GO" list -m -f '{{.Version}}' helm.sh/helm/v4)
[ -n "$VERSION" ] || { echo "build-helm: runtime/helm/go.mod requires no helm.sh/helm/v4" >&2; exit 1; }
if [ -f "$OUT/MANIFEST" ] && [ -x "$OUT/helm" ]; then
  echo "build-helm: $OUT/helm is built ($VERSION)"
  exit 0
fi
started=$SECONDS
tmp=$OUT.tmp.$$
trap 'rm -rf "$tmp"' EXIT
rm -rf "$tmp"
mkdir -p "$tmp"
echo "build-helm: go build helm.sh/helm/v4/cmd/helm@$VERSION (a few minutes once)"
# helm version reports what internal/version says; the release builds set
# it with -X, as here.
(cd "$MOD" && CGO_ENABLED=0 GOFLAGS=-mod=readonly "$GO" build -trimpath -buildvcs=false \
  -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$VERSION" \
  -o "$tmp/helm" helm.sh/helm/v4/cmd/helm)
got=$("$tmp/helm" version --template '{{.Version}}')
[ "$got" = "$VERSION" ] || { echo "build-helm: the built helm says \"$got\", want \"$VERSION\"" >&2; exit 1; }
chmod 0755 "$tmp" "$tmp/helm"
{
  echo "helm.sh/helm/v4 $VERSION"
  echo "go $("$GO" env GOVERSION)"
  echo "sha256 $(sha256sum "$tmp/helm" | cut -d' ' -f1)"
} >"$tmp/MANIFEST"
rm -rf "$OUT"
mv "$tmp" "$OUT"
trap - EXIT
echo "build-helm: $OUT/helm ($VERSION, $(du -h "$OUT/helm" | cut -f1)) in $((SECONDS - started)) s"
