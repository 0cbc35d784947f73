# shellcheck shell=bash
# The one recipe build-helm.sh and build-egctl.sh share: a Go command built
# from the Go module proxy at the version its own module in runtime/<tool>
# pins (go.sum checking every module), static and -trimpath, its version
# stamped with -X as its release builds stamp it and checked by running it,
# into the build cache under a name carrying a hash of the recipe (the
# calling script, this file, go.mod and go.sum). Sourced, not run: the
# caller sets
#   TOOL           the binary's name and its module's directory (runtime/$TOOL)
#   TOOL_MODULE    the module whose pinned version is built
#   TOOL_PKG       the main package
#   TOOL_VERSION_X the -X variable the release builds set to the version
#   TOOL_DIR       the output directory its CODEINTERP_*_DIR names, or ""
#   TOOL_TAKES     how long a first build takes, for the log
# and defines tool_version BINARY (prints what the binary says its version
# is), then calls go_tool_build "$@".
#
# Output (never in git):
#   ${TOOL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/codeinterp/$TOOL-<recipe hash>}/
#     $TOOL     the binary
#     MANIFEST  the pinned version, the Go toolchain and the binary's
#               sha256; written last (the cache stamp)

go_tool_build() {
  local here mod go recipe out version started got
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  mod=$here/$TOOL
  go=${GO:-go}
  recipe=$(cat "${BASH_SOURCE[1]}" "${BASH_SOURCE[0]}" "$mod/go.mod" "$mod/go.sum" | sha256sum | cut -c1-12)
  out=${TOOL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/codeinterp/$TOOL-$recipe}

  case "${1:-}" in
    --print-path) echo "$out/$TOOL"; return 0 ;;
    "") ;;
    *) echo "usage: ${BASH_SOURCE[1]} [--print-path]" >&2; return 2 ;;
  esac
  command -v "$go" >/dev/null || { echo "build-$TOOL: needs Go ($go) on PATH" >&2; return 1; }
  version=$(cd "$mod" && GOFLAGS=-mod=readonly "$go" list -m -f '{{.Version}}' "$TOOL_MODULE")
  [ -n "$version" ] || { echo "build-$TOOL: runtime/$TOOL/go.mod requires no $TOOL_MODULE" >&2; return 1; }
  if [ -f "$out/MANIFEST" ] && [ -x "$out/$TOOL" ]; then
    echo "build-$TOOL: $out/$TOOL is built ($version)"
    return 0
  fi
  started=$SECONDS
  GO_TOOL_TMP=$out.tmp.$$
  trap 'rm -rf "$GO_TOOL_TMP"' EXIT
  rm -rf "$GO_TOOL_TMP"
  mkdir -p "$GO_TOOL_TMP"
  echo "build-$TOOL: go build $TOOL_PKG@$version ($TOOL_TAKES)"
  (cd "$mod" && CGO_ENABLED=0 GOFLAGS=-mod=readonly "$go" build -trimpath -buildvcs=false \
    -ldflags "-s -w -X $TOOL_VERSION_X=$version" \
    -o "$GO_TOOL_TMP/$TOOL" "$TOOL_PKG")
  got=$(tool_version "$GO_TOOL_TMP/$TOOL")
  [ "$got" = "$version" ] || { echo "build-$TOOL: the built $TOOL says \"$got\", want \"$version\"" >&2; return 1; }
  chmod 0755 "$GO_TOOL_TMP" "$GO_TOOL_TMP/$TOOL"
  {
    echo "$TOOL_MODULE $version"
    echo "go $("$go" env GOVERSION)"
    echo "sha256 $(sha256sum "$GO_TOOL_TMP/$TOOL" | cut -d' ' -f1)"
  } >"$GO_TOOL_TMP/MANIFEST"
  rm -rf "$out"
  mv "$GO_TOOL_TMP" "$out"
  trap - EXIT
  echo "build-$TOOL: $out/$TOOL ($version, $(du -h "$out/$TOOL" | cut -f1)) in $((SECONDS - started)) s"
}
