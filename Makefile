# codeinterp — every target does its own set-up through its dependencies.
#   make demo    the main job: server + sandbox + scripted model, a real code_interpreter_call
#   make test    every test (needs root: cgroups; builds the CPython-WASI runtime first)
#   make bench   benchmarks → docs/benchmarks.md
#   make lint    gofmt, go vet, staticcheck

GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
TESTFLAGS   ?= -count=1 -timeout 40m
BENCHTIME   ?= 1s

.PHONY: all setup runtime gvisor redis deps build test bench lint demo clean

all: build

# Toolchain pieces that come from Debian (the runtime script installs its own).
setup: deps runtime gvisor redis

deps:
	$(GO) mod download

# CPython 3.13 for wasm32-wasip1, built once into ~/.cache/codeinterp (seconds when cached).
runtime:
	bash runtime/build-python-wasi.sh

# runsc and Debian's python3 scientific stack for sandbox.provider: gvisor
# (apt; nothing is asked of apt once they are installed).
gvisor:
	bash runtime/install-gvisor.sh

# Debian's redis-server for the store/redis tests (each test starts its own
# on a loopback port; nothing runs globally).
redis:
	bash runtime/install-redis.sh

build: deps
	$(GO) build -o bin/extproc ./cmd/extproc

test: setup
	$(GO) test $(TESTFLAGS) ./...

# Micro-benchmarks run for a time; the sandbox and end-to-end ones for a
# fixed count (each iteration starts processes or waits for re-warming).
bench: setup
	@mkdir -p docs
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) ./interceptor ./sandbox/memfs | tee bench.out
	$(GO) test -run '^$$' -bench . -benchtime 40x -timeout 30m ./sandbox/wasm ./sandbox/worker | tee -a bench.out
	$(GO) test -run '^$$' -bench SympyImportColdStart -benchtime 3x -timeout 30m ./sandbox/wasm | tee -a bench.out
	$(GO) test -run '^$$' -bench . -benchtime 20x -timeout 30m ./sandbox/gvisor | tee -a bench.out
	$(GO) test -run '^$$' -bench PassThroughOverhead -benchtime 2000x -timeout 30m ./e2e | tee -a bench.out
	$(GO) test -run '^$$' -bench CodeInterpreterOverhead -benchtime 40x -timeout 30m ./e2e | tee -a bench.out
	$(GO) test -run '^$$' -bench LoadThroughDev -benchtime 1x -timeout 30m ./e2e | tee -a bench.out
	$(GO) run ./internal/benchtable < bench.out > docs/benchmarks.md
	@rm -f bench.out
	@echo "wrote docs/benchmarks.md"

lint: deps
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

demo: setup build
	$(GO) build -o bin/extproc-demo ./cmd/extproc-demo
	bin/extproc-demo --extproc bin/extproc

clean:
	rm -rf bin bench.out
