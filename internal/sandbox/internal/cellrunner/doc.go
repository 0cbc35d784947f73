// Package cellrunner is the Python both kernels run a program ("a cell")
// with — the WASM guest's (sandbox/worker/bootstrap.py) and the gVisor
// sandbox's (sandbox/gvisor/kernel.py): one persistent namespace, the last
// expression shown as in a notebook, the cell's own source in tracebacks
// and none of the kernel's frames, the status the host is told (ok, error,
// memory, timeout), and the flush before the run's end marker. Each kernel
// keeps what is its own: how programs reach it and how results go back,
// file operations, figures, reseeding.
//
//   - cellrunner.py: the runner, its functions named _codeinterp_*.
//   - cellrunner.go: Prepend, which puts it before a kernel's source.
package cellrunner
