// Package envoy holds the deployment files that put codeinterp behind Envoy:
// envoy.yaml (a static Envoy bootstrap) and gateway/ (Envoy Gateway and
// Kubernetes manifests: charts/codeinterp rendered with `helm template` for
// the documented value sets beside them). It has no code of its own; its
// tests load those files, and the chart rendered by the pinned helm
// (runtime/build-helm.sh) for a matrix of values, into the real API types
// (go-control-plane's Bootstrap, Envoy Gateway's and Gateway API's and
// Kubernetes' Go types), validate them the way Envoy and the API server
// would, check that they pair with the server's configuration (package
// config, and `extproc validate-config`), and fail when the checked-in
// renderings drift from the chart.
package envoy
