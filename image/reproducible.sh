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
podman image inspect --format '{{json .RootFS.Layers}}' "$first" | tr ',' '\n' > "$tmp/layers1"
podman image inspect --format '{{json .RootFS.Layers}}' "$ref" | tr ',' '\n' > "$tmp/layers2"
n=$(wc -l < "$tmp/layers1")
same=$(paste -d' ' "$tmp/layers1" "$tmp/layers2" | awk '$1 == $2' | wc -l)
echo "  layers: $same of $n identical; history of the differing ones:"
podman history --no-trunc --format '{{.ID}} {{.CreatedBy}}' "$ref" | cut -c1-160 | sed 's/^/    /' | head -20
for i in 1 2; do
  img=$first; [ "$i" = 1 ] || img=$ref
  podman image inspect --format '{{json .Config}} {{.Created}}' "$img" > "$tmp/config$i"
done
cmp -s "$tmp/config1" "$tmp/config2" && echo "  config: identical" || { echo "  config:"; diff "$tmp/config1" "$tmp/config2" | sed 's/^/    /'; }

# Files: path, mode, owner, size, mtime and content hash of every file.
for i in 1 2; do
  img=$first; [ "$i" = 1 ] || img=$ref
  mnt=$(podman image mount "$img")
  (cd "$mnt" && find . -printf '%p %m %U:%G %s %T@ %l\n' | sort > "$tmp/meta$i" &&
    find . -type f -print0 | sort -z | xargs -0 sha256sum > "$tmp/sums$i")
  podman image umount "$img" >/dev/null
done
echo "  files whose content differs:"
diff "$tmp/sums1" "$tmp/sums2" | awk '/^[<>]/ { print $3 }' | sort -u | sed 's/^/    /' | head -50
echo "  files whose metadata differs (path mode owner size mtime):"
diff "$tmp/meta1" "$tmp/meta2" | awk '/^[<>]/ { print $2 }' | sort -u | sed 's/^/    /' | head -50
exit 1
