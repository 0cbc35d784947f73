#!/usr/bin/env bash
# Installs what the gVisor sandbox provider (sandbox.provider: gvisor) needs
# on the host besides runsc (runtime/build-runsc.sh builds the pinned one
# from the Go module proxy; Debian's runsc package is not used): Debian's
# CPython 3 with the scientific stack the sandbox offers to code, from the
# machine's own Debian suites. The sandbox itself runs on its own root
# filesystem (build-gvisor-rootfs.sh, the same package list); the host's
# copy is the native baseline the benchmarks compare with
# (/usr/bin/python3). Idempotent: it asks apt only for packages that are
# not installed yet. Needs root.
#
# Usage: runtime/install-gvisor.sh [--print-packages]
#   --print-packages  print the package list (one line) and exit: the gVisor
#                     image (image/build.sh) installs the same set.
set -euo pipefail

# Keep in step with deploy/envoy/gateway/codeinterp-gvisor.yaml (what the
# image must contain). The tool description the model reads is derived from
# what actually imports inside the sandbox, not from this list.
packages=(
  python3
  python3-numpy python3-pandas python3-scipy python3-matplotlib python3-seaborn
  python3-sklearn python3-statsmodels python3-sympy python3-networkx python3-pil
  python3-openpyxl python3-xlrd python3-pypdf python3-docx python3-tabulate
  python3-bs4 python3-lxml python3-dateutil python3-tz
  python3-pip python3-requests # network_policy: pip install and HTTP from allowed domains (ca-certificates comes with them)
  fonts-dejavu-core # matplotlib's default font, for text in charts
)

if [ "${1:-}" = "--print-packages" ]; then
  echo "${packages[*]}"
  exit 0
fi

need=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if ((${#need[@]} == 0)); then
  echo "install-gvisor: the python3 packages are installed"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install-gvisor: missing ${need[*]}; run as root (apt-get install)" >&2
  exit 1
fi
echo "install-gvisor: apt-get install ${need[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
