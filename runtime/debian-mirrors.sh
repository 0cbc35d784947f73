#!/usr/bin/env bash
# Prints the machine's own Debian sources for SUITE and its -updates and
# -security suites, as apt sees them, one "deb URI SUITE COMPONENT" line
# each (never a hard-coded host): what mmdebstrap builds the image's base
# (image/build.sh) and the gVisor sandbox's root (build-gvisor-rootfs.sh)
# from.
#
# Usage: runtime/debian-mirrors.sh SUITE
set -euo pipefail
suite=${1:?usage: debian-mirrors.sh SUITE}
apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT)' 'Identifier: Packages' |
  awk -v s="$suite" '$2 == s || $2 == s"-updates" || $2 == s"-security" { print "deb " $1 " " $2 " " $3 }' | sort -u
