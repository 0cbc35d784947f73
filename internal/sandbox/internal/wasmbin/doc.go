// Package wasmbin reads and rewrites the few parts of a WebAssembly binary
// that snapshots need: which globals are mutable and exported, and a copy of
// the module without its data segments (a snapshot image supplies memory,
// and wazero would otherwise copy every active segment over it on each
// instantiation). It parses only section framing, imports, globals and
// exports; everything else is copied byte for byte.
package wasmbin
