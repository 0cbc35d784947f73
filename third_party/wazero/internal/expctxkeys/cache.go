package expctxkeys

// CompilationCacheTrustedKey is a context.Context key for
// experimental.WithCompilationCacheTrusted. (codeinterp patch)
type CompilationCacheTrustedKey struct{}
