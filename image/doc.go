// Package image holds the container image recipe (Containerfile, build.sh)
// and its test, which runs the built images with podman the way the
// Kubernetes manifests in deploy/envoy/gateway run the pod.
//
// The test needs the images, podman and root, so it is behind the
// imagetest build tag and `make test` does not run it; `make image-test`
// builds both images and runs it:
//
//	go test -tags imagetest ./image -image localhost/codeinterp/extproc:TAG \
//	    -image-gvisor localhost/codeinterp/extproc-gvisor:TAG
package image
