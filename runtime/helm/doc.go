// Package helm pins the helm binary the chart's tests drive (go.mod's tool
// directive; runtime/build-helm.sh builds it) and tests what `helm
// template` cannot show: that charts/codeinterp keeps the secrets it
// generates across upgrades. A module of its own, so that Helm's
// dependency graph never touches the server's go.mod.
package helm
