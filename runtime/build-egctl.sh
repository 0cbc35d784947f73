#!/usr/bin/env bash
# Builds egctl (Envoy Gateway's CLI) from the Go module proxy at the version
# runtime/egctl/go.mod pins, with the go.sum beside it checking every
# module. The chart's tests (deploy/envoy) run its translator, `egctl x
# translate --from gateway-api --to gateway-api,xds`, on each rendering of
# charts/codeinterp: the Gateway API → xDS translation Envoy Gateway's
# controller runs, with the statuses it would write. Nothing of Envoy
# Gateway's dependency graph reaches the server's go.mod: the module in
# runtime/egctl is its own.
#
# Output (never in git; runtime/go-tool.sh is the recipe):
#   ${CODEINTERP_EGCTL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/codeinterp/egctl-<recipe hash>}/
#     egctl     the binary (static, -trimpath)
#     MANIFEST  the pinned version, the Go toolchain and the binary's
#               sha256; written last (the cache stamp)
#
# Moving the pin: in runtime/egctl,
# `go get -tool github.com/envoyproxy/gateway/cmd/egctl@<version>` then
# `go mod tidy` (and the server's go.mod's github.com/envoyproxy/gateway,
# whose Go types and CRDs the other deploy checks use, to the same version).
#
# Usage: runtime/build-egctl.sh [--print-path]
set -euo pipefail

TOOL=egctl
TOOL_MODULE=github.com/envoyproxy/gateway
TOOL_PKG=github.com/envoyproxy/gateway/cmd/egctl
# egctl version reports what internal/cmd/version says; Envoy Gateway's
# release builds set it with -X, as here.
TOOL_VERSION_X=github.com/envoyproxy/gateway/internal/cmd/version.envoyGatewayVersion
TOOL_DIR=${CODEINTERP_EGCTL_DIR:-}
TOOL_TAKES="several minutes once"
tool_version() { "$1" version --remote=false; }
# shellcheck source=go-tool.sh
. "$(dirname "${BASH_SOURCE[0]}")/go-tool.sh"
go_tool_build "$@"
