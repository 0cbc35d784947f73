// Package runtime holds the scripts that build and install the sandboxes'
// runtimes (build-python-wasi.sh, build-runsc.sh with the runsc module that
// pins gVisor, build-gvisor-rootfs.sh, install-gvisor.sh, install-redis.sh,
// build-helm.sh with the helm module that pins Helm for the chart's tests,
// build-egctl.sh with the egctl module that pins Envoy Gateway's CLI, whose
// translator those tests run; both through go-tool.sh, their one recipe) and the C source of the CPython reactor (reactor/ci_reactor.c). It has no Go code of
// its own; its tests check the scripts' logic that needs no build.
package runtime
