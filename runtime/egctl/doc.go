// Package egctl pins the egctl binary (Envoy Gateway's CLI, go.mod's tool
// directive; runtime/build-egctl.sh builds it) whose translator, `egctl x
// translate`, the chart's tests run on every rendering of
// charts/codeinterp (deploy/envoy, translate_test.go): Envoy Gateway's own
// Gateway API → xDS translation, the one its controller runs in a cluster.
// A module of its own, so that Envoy Gateway's dependency graph never
// touches the server's go.mod.
package egctl
