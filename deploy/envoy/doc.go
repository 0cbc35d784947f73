// Package envoy holds the deployment files that put codeinterp behind Envoy:
// envoy.yaml (a static Envoy bootstrap) and gateway/ (Envoy Gateway and
// Kubernetes manifests). It has no code of its own; its tests load those
// files into the real API types (go-control-plane's Bootstrap, Envoy
// Gateway's and Gateway API's and Kubernetes' Go types), validate them the
// way Envoy and the API server would, and check that they pair with the
// server's configuration (package config).
package envoy
