#!/usr/bin/env bash
# Installs what `make image` and `make image-test` need from Debian: podman,
# runc (podman's default crun refuses hybrid-cgroup hosts), mmdebstrap (the
# base image from this machine's apt sources, no registry needed), and for
# podman's bridge network with published ports, CNI's plugins and iptables
# (only Suggested by podman). Idempotent: it asks apt only for packages that
# are missing. Needs root to install.
set -euo pipefail

packages=(podman runc mmdebstrap containernetworking-plugins iptables)
need=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if ((${#need[@]} == 0)); then
  echo "install-podman: $(podman --version), mmdebstrap $(mmdebstrap --version | cut -d' ' -f2)" >&2
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install-podman: missing ${need[*]}; run as root (apt-get install)" >&2
  exit 1
fi
echo "install-podman: apt-get install ${need[*]}" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
podman --version >&2
