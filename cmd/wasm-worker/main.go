// Command wasm-worker is the process the wasm provider starts for each
// interpreter: CPython-WASI under wazero (package sandbox/worker). The
// server starts it from beside its own binary; without it, the server runs
// itself as the worker (its hidden __sandbox-worker command), which works
// the same but starts slower: the server's binary links gRPC, Envoy's API,
// Prometheus and the rest, whose package initialisation alone costs every
// new interpreter about 20 ms of CPU (docs/benchmark-notes.md). This binary
// links only the worker.
//
// It is not meant to be run by hand; the server checks that it was built
// from the same source as itself before it uses it.
package main

import (
	"os"

	"github.com/codeinterp/codeinterp/internal/sandbox/worker"
)

func main() { os.Exit(worker.Main(os.Args[1:])) }
