// Package sandbox defines how codeinterp runs untrusted Python: the Provider
// and Session interfaces the rest of the server depends on, the typed
// outcomes of a run, and the limits an operator sets.
//
// The production implementation lives in the pool sub-package: CPython
// compiled to WASI, run by wazero inside worker processes that the server
// re-executes from its own binary, each confined by its own cgroup. Tests of
// other packages can plug any Provider.
package sandbox
