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
