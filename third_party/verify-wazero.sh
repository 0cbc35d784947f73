#!/usr/bin/env bash
# third_party/wazero is upstream wazero (the version go.mod requires) plus
# the patch series in third_party/wazero-patches, applied in order, and
# nothing else (third_party/README.md).
#
#   verify-wazero.sh           make verify-wazero: takes the version from
#                              the Go module cache (go mod download),
#                              applies the series, removes what the copy
#                              leaves out, and compares the result with
#                              third_party/wazero, file by file, byte by byte.
#   verify-wazero.sh --tests [go test flags]
#                              make wazero-tests: applies the series to the
#                              same download, tests included, and runs
#                              wazero's own tests of the packages the
#                              patches touch, in wazero's own module.
#
# The patches carry their changes to wazero's tests, so the series is
# always applied to the whole module; verify removes the left-out files
# afterwards.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
GO=${GO:-go}
module=github.com/tetratelabs/wazero
patches=("$root"/third_party/wazero-patches/[0-9][0-9][0-9][0-9]-*.patch)

mode=verify
if [ "${1:-}" = --tests ]; then
  mode=tests
  shift
fi

[ -e "${patches[0]}" ] || { echo "verify-wazero: no patches in third_party/wazero-patches" >&2; exit 1; }

# The version is go.mod's requirement (the replace points it at the copy).
version=$(awk -v m="$module" '$1 == m && $2 ~ /^v/ { print $2; exit }' "$root/go.mod")
[ -n "$version" ] || { echo "verify-wazero: go.mod does not require $module" >&2; exit 1; }

# The module cache's copy (read-only); go mod download fetches it through
# GOPROXY when it is not there yet.
if ! json=$(cd "$root" && "$GO" mod download -json "$module@$version"); then
  echo "$json" >&2
  echo "verify-wazero: go mod download $module@$version failed" >&2
  exit 1
fi
dir=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
[ -d "$dir" ] || { echo "verify-wazero: no Dir for $module@$version in: $json" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
work=$tmp/wazero-$version+patches
cp -R "$dir" "$work"
chmod -R u+w "$work"

# Applied with git apply (git is what CI installs; patch(1) would do as
# well: patch -p1 < each). GIT_CEILING_DIRECTORIES keeps git from taking
# a repository around the temporary directory for the one to patch.
for p in "${patches[@]}"; do
  (cd "$work" && GIT_CEILING_DIRECTORIES=$tmp git apply --whitespace=nowarn -p1 "$p") ||
    { echo "verify-wazero: ${p#"$root"/} does not apply to $module $version + the patches before it" >&2; exit 1; }
done
n=${#patches[@]}

if [ "$mode" = tests ]; then
  # The packages the patches touch: the directories of the Go files they
  # change or add (tests included).
  pkgs=$(sed -n 's|^+++ b/\(.*\)\.go$|\1|p' "${patches[@]}" |
    while read -r f; do d=$(dirname "$f"); [ "$d" = . ] && echo . || echo "./$d"; done | sort -u)
  echo "wazero-tests: wazero $version + $n patches, its own tests of:" $pkgs
  # wazero's module, not codeinterp's: -mod=mod lets go fetch a test
  # dependency the module cache lacks; GOTOOLCHAIN=local tests with the
  # Go that builds codeinterp.
  cd "$work"
  # shellcheck disable=SC2086 # one argument per package
  GOFLAGS=-mod=mod GOTOOLCHAIN=local "$GO" test "$@" $pkgs
  exit
fi

# What third_party/wazero leaves out of the module, the whole list:
#   tests:     every *_test.go and testdata/ directory; internal/testing/
#              (test helpers) and internal/integration_test/
#   examples:  examples/, imports/assemblyscript/example/,
#              imports/wasi_snapshot_preview1/example/
#   the CLI:   cmd/ (cmd/wazero) and packaging/ (its installers)
#   CI and the web site: .github/, Makefile, codecov.yml, netlify.toml,
#              .netlify/, .editorconfig, .gitattributes, site/
# Anything else the module holds must be in the copy, and the reverse.
(
  cd "$work"
  find . -type f -name '*_test.go' -delete
  find . -type d -name testdata -prune -exec rm -rf {} +
  rm -rf internal/testing internal/integration_test \
    examples imports/assemblyscript/example imports/wasi_snapshot_preview1/example \
    cmd packaging \
    .github Makefile codecov.yml netlify.toml .netlify .editorconfig .gitattributes site
  find . -type d -empty -delete
)

if ! out=$(cd "$root" && diff -ru "$work" third_party/wazero); then
  printf '%s\n' "$out"
  echo "verify-wazero: third_party/wazero is not wazero $version + $n patches (diff above: - the series applied, + third_party/wazero)" >&2
  exit 1
fi
echo "third_party/wazero is wazero $version + $n patches"
