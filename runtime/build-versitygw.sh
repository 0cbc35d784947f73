#!/usr/bin/env bash
# Builds versitygw (github.com/versity/versitygw), an S3-compatible server,
# from the Go module proxy at the version runtime/versitygw/go.mod pins,
# go.sum checking every module. The tests of the S3 blob store
# (checkpoint/blob/s3) start it on a temporary directory: a real S3 server,
# not a mock. The server itself never runs it.
#
# Output (never in git):
#   ${XDG_CACHE_HOME:-$HOME/.cache}/codeinterp/versitygw-<recipe hash>/versitygw
# The name carries a hash of this script, go.mod and go.sum; a second run
# returns at once.
#
# Usage: runtime/build-versitygw.sh [--print-path]
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MOD=$HERE/versitygw
GO=${GO:-go}
RECIPE=$(cat "${BASH_SOURCE[0]}" "$MOD/go.mod" "$MOD/go.sum" | sha256sum | cut -c1-12)
OUT=${XDG_CACHE_HOME:-$HOME/.cache}/codeinterp/versitygw-$RECIPE

case "${1:-}" in
  --print-path) echo "$OUT/versitygw"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--print-path]" >&2; exit 2 ;;
esac
if [ -x "$OUT/versitygw" ]; then
  echo "build-versitygw: $OUT/versitygw is built"
  exit 0
fi
command -v "$GO" >/dev/null || { echo "build-versitygw: needs Go ($GO) on PATH" >&2; exit 1; }
started=$SECONDS
tmp=$OUT.tmp.$$
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"
echo "build-versitygw: go build github.com/versity/versitygw/cmd/versitygw (about two minutes once)"
(cd "$MOD" && CGO_ENABLED=0 GOFLAGS=-mod=readonly "$GO" build -trimpath -o "$tmp/versitygw" github.com/versity/versitygw/cmd/versitygw)
rm -rf "$OUT"
mv "$tmp" "$OUT"
echo "build-versitygw: $OUT/versitygw in $((SECONDS - started)) s"
