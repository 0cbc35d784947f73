package experimental

import (
	"context"

	"github.com/tetratelabs/wazero/internal/expctxkeys"
)

// WithCompilationCacheTrusted returns a context that makes
// Runtime.CompileModule skip validating function bodies when the module's
// compiled code is already cached (in memory or in the compilation cache):
// the bodies are validated only if they are compiled.
//
// Validating the bodies of a large module costs about as much as decoding
// it, on every process that loads it. Skipping it for cached code gives up
// nothing the cache does not already hold: a cache entry is native code
// that runs as is, so whoever can write the cache directory can run code
// in the process whether or not the module is validated again. Use it only
// with a cache directory writable by the trusted party that filled it.
//
// With it, the compiled module's function bodies are slices of the binary
// passed to CompileModule, not copies: do not modify the binary afterwards.
// (codeinterp patch)
func WithCompilationCacheTrusted(ctx context.Context) context.Context {
	return context.WithValue(ctx, expctxkeys.CompilationCacheTrustedKey{}, struct{}{})
}

// WithCompilationCacheTrustedSHA256 is WithCompilationCacheTrusted for a
// binary whose SHA-256 the caller already holds, e.g. recorded by the
// trusted party that wrote the binary and filled the cache: CompileModule
// keys the compiled code by sum instead of hashing the binary, which is
// most of what loading a large module's cached code costs (about 0.7 ms
// a MB).
//
// On a cache hit sum is trusted as is: the cached code runs with the
// structure decoded from binary, so a sum that is not binary's can run
// code compiled from another module. Give only a sum written, with the
// binary, by whoever may write the cache. Without a hit, binary is hashed
// and compared with sum before anything is compiled: a wrong sum is an
// error, and nothing is compiled or cached under it.
// (codeinterp patch)
func WithCompilationCacheTrustedSHA256(ctx context.Context, sum [32]byte) context.Context {
	ctx = WithCompilationCacheTrusted(ctx)
	return context.WithValue(ctx, expctxkeys.ModuleSHA256Key{}, sum)
}
