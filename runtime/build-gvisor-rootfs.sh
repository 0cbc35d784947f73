#!/usr/bin/env bash
# Builds the gVisor sandbox's root filesystem: a Debian tree holding Debian's
# essential set, python3 and the data-science packages of install-gvisor.sh,
# made with mmdebstrap from this machine's apt sources (the suite it runs
# and its -updates and -security suites, as the image's base is), never
# from anything the host has installed. The sandbox sees this tree,
# read-only, as its / : nothing of the host's /usr or /etc, so what code
# finds there (and the package versions in the tool's description) is the
# same on a laptop, in CI and in the gVisor image.
#
# Output (never in git):
#   ${CODEINTERP_GVISOR_ROOTFS:-${XDG_CACHE_HOME:-$HOME/.cache}/codeinterp/gvisor-rootfs-<recipe hash>}/
#     the tree, root-owned, writable only by root; mount points /mnt/data,
#     /run/ci/in and /run/ci/out (files: the control FIFOs are bound on
#     them); no apt lists, caches or logs; docs and manuals excluded
#     MANIFEST  "package version" of every installed package, the suite and
#               the mirrors; written last (the cache stamp)
#
# The name carries a hash of this script, the package list and the mirrors,
# so a changed recipe builds into a new directory, and a second run returns
# at once. Needs root and mmdebstrap (apt-get install mmdebstrap).
#
# Usage: runtime/build-gvisor-rootfs.sh [--print-dir]
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SUITE=${SUITE:-$(. /etc/os-release && echo "$VERSION_CODENAME")}
# The sandbox's packages are install-gvisor.sh's, less runsc (the host runs
# it; the sandbox never sees it).
read -r -a packages <<<"$(bash "$HERE/install-gvisor.sh" --print-packages)"
pkgs=()
for p in "${packages[@]}"; do [ "$p" = runsc ] || pkgs+=("$p"); done
mapfile -t mirrors < <(bash "$HERE/debian-mirrors.sh" "$SUITE")
((${#mirrors[@]})) || { echo "build-gvisor-rootfs: no apt source for $SUITE in this machine's apt configuration (run apt-get update?)" >&2; exit 1; }
RECIPE=$(printf '%s\n' "$(cat "${BASH_SOURCE[0]}")" "$SUITE" "${pkgs[*]}" "${mirrors[*]}" | sha256sum | cut -c1-12)
CACHE_ROOT=${XDG_CACHE_HOME:-$HOME/.cache}/codeinterp
OUT=${CODEINTERP_GVISOR_ROOTFS:-$CACHE_ROOT/gvisor-rootfs-$RECIPE}

if [ "${1:-}" = "--print-dir" ]; then echo "$OUT"; exit 0; fi
if [ -f "$OUT/MANIFEST" ]; then
  echo "build-gvisor-rootfs: $OUT is built"
  exit 0
fi
[ "$(id -u)" = 0 ] || { echo "build-gvisor-rootfs: needs root (mmdebstrap builds a root-owned tree)" >&2; exit 1; }
if ! command -v mmdebstrap >/dev/null; then
  echo "build-gvisor-rootfs: apt-get install mmdebstrap"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
fi

started=$SECONDS
tmp=$OUT.tmp.$$
trap 'rm -rf "$tmp"' EXIT
rm -rf "$tmp"
echo "build-gvisor-rootfs: mmdebstrap $SUITE (essential + ${#pkgs[@]} packages) from: ${mirrors[*]}"
# essential: the Essential: yes set (dash, coreutils, ... — code may run
# subprocesses) and what the packages depend on; no apt, no recommends.
mmdebstrap --quiet --variant=essential --mode=root \
  --include="$(IFS=,; echo "${pkgs[*]}")" \
  --aptopt='APT::Install-Recommends "false"' \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/* "$1"/var/cache/ldconfig/aux-cache' \
  "$SUITE" "$tmp" "${mirrors[@]}"

# mmdebstrap copies the build machine's /etc/hostname and /etc/resolv.conf
# in and writes its apt sources: none of the host's configuration may reach
# the sandbox (it has no network; its hostname is "sandbox", and the server
# binds its own /etc/hosts, passwd and group over the tree's).
printf 'sandbox\n' >"$tmp/etc/hostname"
: >"$tmp/etc/resolv.conf"
: >"$tmp/etc/hosts"
rm -f "$tmp/etc/apt/sources.list"
rm -rf "$tmp/etc/apt/sources.list.d"
chmod 0644 "$tmp/etc/hostname" "$tmp/etc/resolv.conf" "$tmp/etc/hosts"

# Mount points of the sandbox's spec (internal/sandbox/gvisor/bundle.go): the root is
# read-only, so each must exist in the tree.
mkdir -p "$tmp/mnt/data" "$tmp/run/ci" "$tmp/tmp" "$tmp/proc" "$tmp/dev" "$tmp/sys"
: >"$tmp/run/ci/in"
: >"$tmp/run/ci/out"
chown -R 0:0 "$tmp"
chmod -R go-w "$tmp"
chmod 1777 "$tmp/tmp"

{
  echo "suite $SUITE"
  printf 'mirror %s\n' "${mirrors[@]}"
  dpkg-query --admindir="$tmp/var/lib/dpkg" -W -f='${Package} ${Version}\n'
} >"$tmp/MANIFEST"
rm -rf "$OUT"
mv "$tmp" "$OUT"
trap - EXIT
echo "build-gvisor-rootfs: $OUT ($(du -sh "$OUT" | cut -f1), $((SECONDS - started)) s)"
