#!/usr/bin/env bash
# Builds helm (Helm 4) from the Go module proxy at the version
# runtime/helm/go.mod pins, with the go.sum beside it checking every module.
# The chart's tests (deploy/envoy) drive this binary: helm lint --strict and
# helm template of charts/codeinterp. Nothing of Helm's dependency graph
# reaches the server's go.mod: the module in runtime/helm is its own (its
# tests render the chart with Helm's engine and an in-memory cluster, for
# what `helm template` cannot show: lookup across upgrades).
#
# Output (never in git; runtime/go-tool.sh is the recipe):
#   ${CODEINTERP_HELM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/codeinterp/helm-<recipe hash>}/
#     helm      the binary (static, -trimpath)
#     MANIFEST  the pinned version, the Go toolchain and the binary's
#               sha256; written last (the cache stamp)
#
# Moving the pin: in runtime/helm, `go get -tool helm.sh/helm/v4/cmd/helm@<version>`
# then `go mod tidy`.
#
# Usage: runtime/build-helm.sh [--print-path]
set -euo pipefail

TOOL=helm
TOOL_MODULE=helm.sh/helm/v4
TOOL_PKG=helm.sh/helm/v4/cmd/helm
# helm version reports what internal/version says; the release builds set
# it with -X, as here.
TOOL_VERSION_X=helm.sh/helm/v4/internal/version.version
TOOL_DIR=${CODEINTERP_HELM_DIR:-}
TOOL_TAKES="a few minutes once"
tool_version() { "$1" version --template '{{.Version}}'; }
# shellcheck source=go-tool.sh
. "$(dirname "${BASH_SOURCE[0]}")/go-tool.sh"
go_tool_build "$@"
