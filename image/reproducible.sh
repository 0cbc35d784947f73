#!/usr/bin/env bash
# Builds one image variant twice from scratch (image/build.sh --no-cache: a
# new mmdebstrap base, every layer rebuilt) from the same checkout, and
# compares the two: image id (the config's digest, which names every
# layer's content digest) and manifest digest, then, where they differ, the
# config, the layers, and the files in them.
#
#   image/reproducible.sh [--variant wasm|gvisor] [--base IMAGE]
#
# Exit status 0 when the two builds are identical, 1 when they differ (the
# report says where). Run it on a clean checkout of a commit: build.sh
# labels a modified tree's image -dirty, and a commit in between changes
# the revision and SOURCE_DATE_EPOCH.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tmp=$(mktemp -d)
first=""
cleanup() {
  [ -z "$first" ] || podman image umount "$first" >/dev/null 2>&1 || true
  [ -z "$first" ] || podman rmi "$first" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

build() { bash image/build.sh --no-cache "$@" | tail -n1; }
info() { # image → id and digest
  podman image inspect --format '{{.Id}} {{.Digest}}' "$1"
}

echo "== build 1" >&2
t0=$(date +%s)
ref=$(build "$@")
t1=$(date +%s)
first=${ref%:*}:repro-first
podman tag "$ref" "$first"
echo "== build 2" >&2
build "$@" >/dev/null
t2=$(date +%s)

read -r id1 dig1 < <(info "$first")
read -r id2 dig2 < <(info "$ref")
echo "build 1: $((t1 - t0))s  id $id1  digest $dig1"
echo "build 2: $((t2 - t1))s  id $id2  digest $dig2"
if [ "$id1" = "$id2" ]; then
  echo "reproducible: the two builds of $ref are identical"
  exit 0
fi

echo "the builds differ:"
podman image inspect --format '{{range .RootFS.Layers}}{{println .}}{{end}}' "$first" | grep . > "$tmp/layers1"
podman image inspect --format '{{range .RootFS.Layers}}{{println .}}{{end}}' "$ref" | grep . > "$tmp/layers2"
# The layer-making steps of the history, oldest first, one per layer.
podman history --no-trunc --format '{{.CreatedBy}}' "$ref" | tac |
  grep -v '#(nop) \(ARG\|ENV\|USER\|ENTRYPOINT\|CMD\|LABEL\)' | cut -c1-110 > "$tmp/steps"
for i in 1 2; do
  img=$first; [ "$i" = 1 ] || img=$ref
  podman image inspect --format '{{json .Config}} {{.Created}}' "$img" > "$tmp/config$i"
done
cmp -s "$tmp/config1" "$tmp/config2" && echo "  config: identical" || { echo "  config:"; diff "$tmp/config1" "$tmp/config2" | sed 's/^/    /'; }
# Layers as tar files (uncompressed, named by digest), to list the
# differing ones entry by entry: name, mode, owner, size, time, link, xattrs.
podman save -q --format docker-dir -o "$tmp/save1" "$first" >/dev/null
podman save -q --format docker-dir -o "$tmp/save2" "$ref" >/dev/null
n=$(wc -l < "$tmp/layers1")
for ((l = 1; l <= n; l++)); do
  d1=$(sed -n "${l}p" "$tmp/layers1") d2=$(sed -n "${l}p" "$tmp/layers2")
  step=$(sed -n "${l}p" "$tmp/steps")
  if [ "$d1" = "$d2" ]; then
    echo "  layer $l identical: $step"
    continue
  fi
  echo "  layer $l DIFFERS: $step"
  for i in 1 2; do
    dig=$(sed -n "${l}p" "$tmp/layers$i"); dig=${dig#sha256:}
    f=$tmp/save$i/$dig
    [ -f "$f" ] || { echo "    (layer $dig not found in the saved image $i)"; continue; }
    tar --full-time --xattrs -tvf "$f" > "$tmp/list$i.$l"
    (mkdir -p "$tmp/x$i.$l" && tar -C "$tmp/x$i.$l" -xf "$f" 2>/dev/null; cd "$tmp/x$i.$l" && find . -type f -print0 | sort -z | xargs -0r sha256sum) > "$tmp/sum$i.$l"
  done
  if [ -f "$tmp/list1.$l" ] && [ -f "$tmp/list2.$l" ]; then
    echo "    entries differing (tar -tv):"
    diff "$tmp/list1.$l" "$tmp/list2.$l" | grep '^[<>]' | head -20 | sed 's/^/      /'
    echo "    files whose content differs:"
    diff "$tmp/sum1.$l" "$tmp/sum2.$l" | awk '/^[<>]/ { print $3 }' | sort -u | head -20 | sed 's/^/      /'
    cmp -s <(sort "$tmp/list1.$l") <(sort "$tmp/list2.$l") && echo "    (same entries in another order)"
  fi
  rm -rf "$tmp/x1.$l" "$tmp/x2.$l"
done
exit 1
