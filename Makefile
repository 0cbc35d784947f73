# codeinterp — every target does its own set-up through its dependencies.
#   make demo    the main job: server + sandbox + scripted model, a real code_interpreter_call
#                (sets up only what it uses: Go modules and the CPython-WASI runtime)
#   make test    every test (needs root: cgroups; builds the CPython-WASI runtime first;
#                the JS clients' tests need node and npm: make node-deps)
#   make bench   benchmarks → docs/benchmarks.md
#   make lint    gofmt, go vet, staticcheck
#   make verify-wazero  third_party/wazero is wazero + third_party/wazero-patches
#   make wazero-tests   wazero's own tests of the packages the patches touch
#   make image   the OCI image, with podman (VARIANT=gvisor: the gVisor one;
#                BASE=debian:bookworm-slim: a pulled base); image/README.md
#   make image-test  builds both images and runs them as the manifests run the pod
#   make helm    the pinned helm (runtime/helm) the chart's tests drive
#   make egctl   the pinned egctl (runtime/egctl) whose translator the chart's tests run
#   make chart-render  deploy/envoy/gateway's manifests again from charts/codeinterp

GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
TESTFLAGS   ?= -count=1 -timeout 40m
BENCHTIME   ?= 1s
WAZERO_TESTFLAGS ?= -count=1 -timeout 20m
# make image: wasm (codeinterp/extproc) or gvisor (codeinterp/extproc-gvisor);
# BASE empty means a Debian base made here by mmdebstrap.
VARIANT     ?= wasm
BASE        ?=
IMAGE_FLAGS  = $(if $(BASE),--base $(BASE))

.PHONY: all setup runtime gvisor gvisor-rootfs redis s3-server helm helm-tests egctl chart-render node node-deps deps build test wazero-tests verify-wazero bench lint demo clean image image-test image-reproducible

all: build

# Toolchain pieces that come from Debian (the runtime script installs its own).
setup: deps runtime gvisor gvisor-rootfs redis node

deps:
	$(GO) mod download

# CPython 3.13 for wasm32-wasip1, built once into ~/.cache/codeinterp (seconds when cached).
runtime:
	bash runtime/build-python-wasi.sh

# The pinned runsc (built from the Go module proxy at runtime/runsc/go.mod's
# version into the build cache; minutes once, seconds when cached) and
# Debian's python3 scientific stack, the native baseline (apt; nothing is
# asked of apt once they are installed), for sandbox.provider: gvisor.
gvisor:
	@echo "gvisor: runsc and Debian's python3 scientific stack, for sandbox.provider: gvisor and its tests (the demo does not use them)"
	GO=$(GO) bash runtime/build-runsc.sh
	bash runtime/install-gvisor.sh

# The gVisor sandbox's root filesystem: a Debian tree with python3 and the
# package set, made with mmdebstrap from the machine's apt sources into
# ~/.cache/codeinterp (minutes once, seconds when cached).
gvisor-rootfs:
	@echo "gvisor-rootfs: the gVisor sandbox's root filesystem, for sandbox.provider: gvisor and its tests"
	bash runtime/build-gvisor-rootfs.sh

# versitygw, the S3-compatible server the tests of the S3 checkpoint
# store start (built from the Go module proxy at runtime/versitygw/go.mod's
# version into the build cache: about two minutes once). Tests only: the
# demo and the server never need it.
s3-server:
	@echo "s3-server: versitygw, the S3-compatible server the checkpoint store tests start"
	GO=$(GO) bash runtime/build-versitygw.sh

# helm (Helm 4), built from the Go module proxy at runtime/helm/go.mod's
# version into the build cache (minutes once, seconds when cached), for the
# chart's tests: deploy/envoy runs `helm lint --strict` and `helm template`
# of charts/codeinterp (CODEINTERP_HELM names the binary), and runtime/helm's
# own tests render it with Helm's engine against an in-memory cluster
# (lookup across upgrades). The server never needs it.
helm:
	@echo "helm: the pinned helm, which the chart's tests drive"
	GO=$(GO) bash runtime/build-helm.sh

# egctl (Envoy Gateway's CLI), built from the Go module proxy at
# runtime/egctl/go.mod's version into the build cache (several minutes once,
# seconds when cached), for the chart's tests: deploy/envoy runs its
# translator (`egctl x translate`, Envoy Gateway's Gateway API → xDS
# translation) on every rendering (CODEINTERP_EGCTL names the binary). The
# server never needs it.
egctl:
	@echo "egctl: the pinned egctl, whose translator the chart's tests run"
	GO=$(GO) bash runtime/build-egctl.sh

helm-tests: helm
	cd runtime/helm && $(GO) test $(TESTFLAGS) ./...

# Renders deploy/envoy/gateway's two manifests from the chart (the
# documented value sets beside them); deploy/envoy's tests fail when the
# checked-in files differ from a fresh rendering.
chart-render: helm
	@set -e; helm=$$(bash runtime/build-helm.sh --print-path); \
	for v in wasm gvisor; do \
	  out=deploy/envoy/gateway/codeinterp$$( [ $$v = wasm ] || echo -$$v ).yaml; \
	  $$helm template codeinterp charts/codeinterp --namespace codeinterp -f deploy/envoy/gateway/$$v.values.yaml >$$out; \
	  echo "chart-render: $$out"; \
	done

# Debian's redis-server for the store/redis tests (each test starts its own
# on a loopback port; nothing runs globally).
redis:
	@echo "redis: redis-server, which the store/redis and cluster tests start (store.backend: redis in production)"
	bash runtime/install-redis.sh

# Node.js and npm for the JS client tests (e2e/node): Debian's nodejs and
# npm when node or npm is missing; a machine that has both (from any
# source: NodeSource's nodejs bundles npm and conflicts with Debian's npm
# package) is left alone.
node:
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
	  echo "node: $$(node --version), npm $$(npm --version)"; \
	else \
	  test "$$(id -u)" = 0 || { echo "node: node or npm is missing; run as root (apt-get install nodejs npm)" >&2; exit 1; }; \
	  echo "node: apt-get install nodejs npm"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null; \
	fi

# The pinned JS clients (e2e/node/package-lock.json) for e2e/node_test.go;
# npm ci runs again only when the lock file or package.json changed.
NODE_STAMP = e2e/node/node_modules/.installed
node-deps: node $(NODE_STAMP)
	@echo "node-deps: the pinned npm clients (OpenAI Node SDK, Agents SDK, AI SDK, LangChain) the JS client tests run"
$(NODE_STAMP): e2e/node/package-lock.json e2e/node/package.json
	npm ci --prefix e2e/node --no-audit --no-fund
	@touch $@

# wasm-worker beside extproc: the server starts it for each wasm
# interpreter (without it the server runs itself, ~20 ms slower per start).
build: deps
	$(GO) build -o bin/ ./cmd/extproc ./cmd/wasm-worker

test: setup node-deps s3-server helm egctl
	CODEINTERP_HELM=$$(bash runtime/build-helm.sh --print-path) CODEINTERP_EGCTL=$$(bash runtime/build-egctl.sh --print-path) \
	  $(GO) test $(TESTFLAGS) ./...
	$(MAKE) --no-print-directory helm-tests
	$(MAKE) --no-print-directory wazero-tests

# third_party/wazero is wazero v1.12.0 with the patch series in
# third_party/wazero-patches (third_party/README.md). verify-wazero applies
# the series to the Go module cache's v1.12.0 and compares the result with
# the copy; wazero-tests applies it to the same download, tests included,
# and runs wazero's own tests of the packages the patches touch (the copy
# is a nested module: go test ./... does not reach it).
verify-wazero:
	@GO=$(GO) bash third_party/verify-wazero.sh

wazero-tests:
	@GO=$(GO) bash third_party/verify-wazero.sh --tests $(WAZERO_TESTFLAGS)

# The gVisor benchmarks make bench runs again on ptrace and on Debian's runsc.
GVISOR_SIDE_BENCH = GVisorColdSession$$|GVisorSessionThroughput$$|GVisorWarmPrint25$$|GVisorPandasPlot|GVisorOsStat

# Micro-benchmarks run for a time; the sandbox and end-to-end ones for a
# fixed count (each iteration starts processes or waits for re-warming).
bench: setup
	@mkdir -p docs
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) ./internal/interceptor ./internal/filter ./internal/sandbox/memfs | tee bench.out
	$(GO) test -run '^$$' -bench 'Print25|SessionThroughput|ColdSession|SympySession$$|WorkerPeakRSS|NativePython3Subprocess|InterpreterStartCPU' -benchtime 40x -timeout 30m ./internal/sandbox/wasm | tee -a bench.out
	@# A rate: over 200 sessions, so the 2 warm interpreters and the first workers' start do not decide it.
	$(GO) test -run '^$$' -bench 'FreshSessions' -benchtime 200x -timeout 30m ./internal/sandbox/wasm | tee -a bench.out
	$(GO) test -run '^$$' -bench . -benchtime 40x -timeout 30m ./internal/sandbox/worker | tee -a bench.out
	$(GO) test -run '^$$' -bench SympyImportColdStart -benchtime 3x -timeout 30m ./internal/sandbox/wasm | tee -a bench.out
	$(GO) test -run '^$$' -bench 'SessionCheckpoint|SmallCheckpointCPU' -benchtime 20x -timeout 30m ./internal/sandbox/wasm | tee -a bench.out
	$(GO) test -run '^$$' -bench . -benchtime 20x -timeout 30m ./internal/sandbox/gvisor | tee -a bench.out
	@# The same on ptrace, and on Debian's runsc (ptrace) as a baseline where
	@# it is installed (apt-get install runsc; make setup does not), renamed
	@# GVisor<name>/ptrace and /debian-ptrace for the ratios in the table.
	CODEINTERP_TEST_GVISOR=ptrace $(GO) test -run '^$$' -bench '$(GVISOR_SIDE_BENCH)' -benchtime 20x -timeout 30m ./internal/sandbox/gvisor \
	  | sed -E 's/^Benchmark(GVisor[A-Za-z0-9]+)/Benchmark\1\/ptrace/' | tee -a bench.out
	@if [ -x /usr/bin/runsc ]; then \
	  CODEINTERP_TEST_GVISOR=ptrace,/usr/bin/runsc $(GO) test -run '^$$' -bench '$(GVISOR_SIDE_BENCH)' -benchtime 20x -timeout 30m ./internal/sandbox/gvisor \
	    | sed -E 's/^Benchmark(GVisor[A-Za-z0-9]+)/Benchmark\1\/debian-ptrace/' | tee -a bench.out; \
	else echo "bench: no /usr/bin/runsc (Debian's runsc): the baseline column is not measured"; fi
	$(GO) test -run '^$$' -bench 'WarmRun|ForwardedRun|NewContainers' -benchtime 200x -timeout 30m ./internal/containers | tee -a bench.out
	$(GO) test -run '^$$' -bench 'GVisorShell' -benchtime 20x -timeout 30m ./internal/containers | tee -a bench.out
	$(GO) test -run '^$$' -bench Drain -benchtime 3x -timeout 30m ./internal/containers | tee -a bench.out
	$(GO) test -run '^$$' -bench Responses -benchtime 2000x ./internal/store/memory ./internal/store/redis | tee -a bench.out
	$(GO) test -run '^$$' -bench EgressAddedLatency -benchtime 500x ./internal/egress | tee -a bench.out
	$(GO) test -run '^$$' -bench PassThroughOverhead -benchtime 2000x -timeout 30m ./e2e | tee -a bench.out
	$(GO) test -run '^$$' -bench PlainThroughDev -benchtime 2000x -timeout 30m ./e2e | tee -a bench.out
	$(GO) test -run '^$$' -bench CodeInterpreterOverhead -benchtime 40x -timeout 30m ./e2e | tee -a bench.out
	$(GO) test -run '^$$' -bench NewContainerOverhead -benchtime 100x -timeout 30m ./e2e | tee -a bench.out
	$(GO) test -run '^$$' -bench LiveStreamThroughProxy -benchtime 5x -timeout 30m ./e2e | tee -a bench.out
	$(GO) test -run '^$$' -bench LoadThroughDev -benchtime 1x -timeout 30m ./e2e | tee -a bench.out
	$(GO) test -run '^$$' -bench GVisorFirstCallThroughDev -benchtime 20x -timeout 30m ./e2e | tee -a bench.out
	$(GO) test -run '^$$' -bench MessagesBash -benchtime 20x -timeout 30m ./e2e | tee -a bench.out
	$(GO) test -run '^$$' -bench '^BenchmarkBackground$$' -benchtime 20x -timeout 30m ./e2e | tee -a bench.out
	$(GO) test -run '^$$' -bench TracingOverhead -benchtime 40x -timeout 30m ./e2e | tee -a bench.out
	$(GO) run ./internal/benchtable -notes docs/benchmark-notes.md < bench.out > docs/benchmarks.md
	@rm -f bench.out
	@echo "wrote docs/benchmarks.md"

lint: deps
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags imagetest ./image
	$(GO) run $(STATICCHECK) ./...
	$(GO) run $(STATICCHECK) -tags imagetest ./image
	cd runtime/helm && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...

# The demo needs the Go modules and the CPython-WASI runtime only (the wasm
# provider, the in-process store): not runsc, the gVisor root, Redis or the
# npm clients, which make test sets up.
demo: deps runtime build
	@echo "demo: set up only what it uses (Go modules, the CPython-WASI runtime); make test sets up the rest"
	$(GO) build -o bin/extproc-demo ./cmd/extproc-demo
	bin/extproc-demo --extproc bin/extproc

# Needs root and podman (image/install-podman.sh installs it, with runc and
# mmdebstrap). Everything but the last line goes to stderr; the last line is
# the image reference built.
image:
	@bash image/build.sh --variant $(VARIANT) $(IMAGE_FLAGS)

# Builds both images, then runs them with podman as the manifests in
# deploy/envoy/gateway run the pod (image/image_test.go).
image-test:
	@set -e; \
	wasm=$$(bash image/build.sh --variant wasm $(IMAGE_FLAGS) | tail -n1); \
	gvisor=$$(bash image/build.sh --variant gvisor $(IMAGE_FLAGS) | tail -n1); \
	echo "image-test: $$wasm $$gvisor"; \
	$(GO) test -tags imagetest -count=1 -timeout 30m -v ./image -image "$$wasm" -image-gvisor "$$gvisor"

# Builds VARIANT twice from scratch and compares the two (image/reproducible.sh).
image-reproducible:
	bash image/reproducible.sh --variant $(VARIANT) $(IMAGE_FLAGS)

clean:
	rm -rf bin bench.out
